#!/usr/bin/env bash
# The README's test command: installs the system libraries, builds, runs every test, then the sample batch.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
swift build --build-tests
swift test --skip-build 2>&1 | tee .build/test-output.txt
# The README's main job must keep working: run it and compare with the expected verdict codes.
swift run --skip-build tokenguard batch --config examples/tokenguard.yaml examples/sample-tokens.ndjson > .build/sample-verdicts.ndjson || true
python3 - <<'PY'
import json
codes = [(json.loads(l).get("error") or {}).get("code", "valid") for l in open(".build/sample-verdicts.ndjson")]
expected = ["valid", "nonce_mismatch", "invalid_signature", "token_expired", "invalid_audience", "unknown_key",
            "unsupported_algorithm", "valid", "valid", "valid", "unknown_provider", "invalid_request", "invalid_request"]
assert codes == expected, f"sample batch verdicts changed: {codes}"
print("sample batch: verdicts as expected")
PY
# No definite leaks in a loop of a few thousand accepted and rejected verifications.
bash scripts/leak-check.sh 200
# Kubernetes manifests against the Kubernetes schemas, offline.
bash scripts/validate-deploy.sh
# The OpenAPI document against the live server (schemathesis, bounded).
TOKENGUARD_BIN=.build/debug/tokenguard bash scripts/api-fuzz.sh
# Every fuzz target briefly, after replaying the inputs that once failed (a crash fails the run).
bash scripts/fuzz.sh --all 20
# The benchmark must always build and run (every section briefly; figures reported, no thresholds).
swift run -c release bench --quick --json .build/bench-quick.json
# The release server under rotation, outages and a mix of tokens (every verdict checked), then under abuse.
bash scripts/soak.sh 90
bash scripts/abuse.sh 10
# The whole test suite again under AddressSanitizer (and LeakSanitizer), then under ThreadSanitizer.
bash scripts/sanitize.sh address
bash scripts/sanitize.sh thread
