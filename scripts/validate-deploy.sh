#!/usr/bin/env bash
# Validates the Kubernetes manifests offline against the Kubernetes schemas (kubernetes-validate from PyPI
# bundles them), strictly: unknown fields are errors.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check kubernetes-validate >/dev/null 2>&1 || python3 -m pip install -q kubernetes-validate
kubernetes-validate --strict --quiet deploy/kubernetes/*.yaml
echo "deploy: $(ls deploy/kubernetes/*.yaml | wc -l) Kubernetes manifests valid"
