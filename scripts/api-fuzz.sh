#!/usr/bin/env bash
# Runs schemathesis (PyPI) against the live server on 127.0.0.1 with openapi.yaml: every endpoint, generated valid
# and invalid requests, every check (status codes, content types, response schemas, negative-data rejection).
# Bounded: MAX_EXAMPLES per operation (default 60) and a 10-minute timeout. The server is stopped by its pid.
set -euo pipefail
cd "$(dirname "$0")/.."
examples="${MAX_EXAMPLES:-60}"
python3 -m pip install -q --disable-pip-version-check schemathesis >/dev/null 2>&1 || python3 -m pip install -q schemathesis
bin="${TOKENGUARD_BIN:-.build/debug/tokenguard}"
[ -x "$bin" ] || swift build --product tokenguard >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
log=$(mktemp)
"$bin" serve --config examples/tokenguard.yaml --listen "127.0.0.1:$port" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
timeout 600 schemathesis run openapi.yaml --url "http://127.0.0.1:$port" --checks all --max-examples "$examples" \
  --seed 20261122 --request-timeout 10 --generation-deterministic --no-color
kill -TERM $pid
wait $pid
echo "api-fuzz: schemathesis passed; server drained and exited $?"
