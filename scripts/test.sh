#!/usr/bin/env bash
# The README's test command: installs the system libraries, builds what the tests need (the test product and the
# tokenguard binary, not the benchmark and its peers), runs every unit, integration and end-to-end test, the sample
# batch and the valgrind leak check. Each stage prints its duration. The long runs are in scripts/hardening.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stage.sh

stage "install dependencies" 900 bash scripts/install-deps.sh
stage "module layout (imports vs Package.swift)" 300 bash scripts/check-layout.sh
stage "format (swift format lint --strict)" 300 swift format lint --strict -r -p Sources Tests Benchmarks Fuzz Package.swift
stage "build (debug: tests and tokenguard)" 1800 bash -c 'swift build --product tokenguardPackageTests 2>&1 | grep -E "error|warning: unre|Build" | tail -5; swift build --product tokenguard 2>&1 | grep -E "error|Build" | tail -3; test -x .build/debug/tokenguard'
stage "tests (unit, integration, end to end)" 900 bash -c 'set -o pipefail; swift test --skip-build 2>&1 | tee .build/test-output.txt | grep -E "✘|Test run|error:" | tail -40'
# The README's main job must keep working: run it and compare with the expected verdict codes.
stage "sample batch" 120 bash -c '.build/debug/tokenguard batch --config examples/tokenguard.yaml examples/sample-tokens.ndjson > .build/sample-verdicts.ndjson || true
python3 - <<PY
import json
codes = [(json.loads(l).get("error") or {}).get("code", "valid") for l in open(".build/sample-verdicts.ndjson")]
expected = ["valid", "nonce_mismatch", "invalid_signature", "token_expired", "invalid_audience", "unknown_key",
            "unsupported_algorithm", "valid", "valid", "valid", "unknown_provider", "invalid_request", "invalid_request"]
assert codes == expected, f"sample batch verdicts changed: {codes}"
print("sample batch: verdicts as expected")
PY'
# No definite leaks in a loop of a few thousand accepted and rejected verifications.
stage "leak check (valgrind)" 900 bash scripts/leak-check.sh 200
stage_summary
