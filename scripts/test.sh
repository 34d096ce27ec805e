#!/usr/bin/env bash
# The README's test command: installs the system libraries, builds what the tests need (the test product and the
# tokenguard binary, not the benchmark and its peers, under ThreadSanitizer), runs every unit, integration and
# end-to-end test and the sample batch. Each stage prints its duration. The long runs (and the valgrind leak check, on the release build) are in
# scripts/hardening.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stage.sh

stage "install dependencies" 900 bash scripts/install-deps.sh
stage "module layout (imports vs Package.swift)" 300 bash scripts/check-layout.sh
stage "format (swift format lint --strict)" 300 swift format lint --strict -r -p Sources Tests Benchmarks Fuzz Package.swift
# The suite is built once, with ThreadSanitizer (debug, in .build-tsan), and run under it: every test is also a race
# check, and CI builds no second debug test bundle. The hardening run adds the optimised AddressSanitizer build.
stage "build (debug under ThreadSanitizer: tests and tokenguard)" 1800 bash -c 'set -o pipefail; swift build --sanitize=thread --scratch-path .build-tsan --product tokenguardPackageTests 2>&1 | grep -E "error|warning: unre|Build" | tail -5; swift build --sanitize=thread --scratch-path .build-tsan --product tokenguard 2>&1 | grep -E "error|Build" | tail -3; test -x .build-tsan/debug/tokenguard'
stage "tests (unit, integration, end to end; any ThreadSanitizer report fails)" 1500 bash scripts/sanitize.sh thread
# The README's main job must keep working: run it and compare with the expected verdict codes.
# (Exit 1: some lines were rejected, as expected; anything else, a sanitizer report among them, fails.)
stage "sample batch" 120 bash -c 'status=0; TSAN_OPTIONS=halt_on_error=1 .build-tsan/debug/tokenguard batch --config examples/tokenguard.yaml examples/sample-tokens.ndjson > .build-tsan/sample-verdicts.ndjson || status=$?
[ "$status" -le 1 ] || { echo "sample batch: exit $status" >&2; exit 1; }
python3 - <<PY
import json
codes = [(json.loads(l).get("error") or {}).get("code", "valid") for l in open(".build-tsan/sample-verdicts.ndjson")]
expected = ["valid", "nonce_mismatch", "invalid_signature", "token_expired", "invalid_audience", "unknown_key",
            "unsupported_algorithm", "valid", "valid", "valid", "unknown_provider", "invalid_request", "invalid_request"]
assert codes == expected, f"sample batch verdicts changed: {codes}"
print("sample batch: verdicts as expected")
PY'
stage_summary
