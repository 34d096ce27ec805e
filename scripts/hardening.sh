#!/usr/bin/env bash
# The long checks (CI runs them after scripts/test.sh): the release binary end to end, deploy manifests, the
# OpenAPI document against the live server, every fuzz target, the benchmark, the soak and abuse runs, and the test
# suite under AddressSanitizer (optimised build; scripts/test.sh runs it under ThreadSanitizer). One release build
# folder serves every release stage. Each stage prints its duration and has a time limit.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stage.sh

stage "install dependencies" 900 bash scripts/install-deps.sh
# Every release build here links the Swift runtime statically, as the container image's does (deploy/Dockerfile):
# one release build folder then serves every stage, the image check included (the flag changes every compile).
stage "build (release: tokenguard, stress)" 1500 bash -c 'swift build -c release --static-swift-stdlib --product tokenguard 2>&1 | grep -E "error|Build" | tail -3; swift build -c release --static-swift-stdlib --product stress 2>&1 | grep -E "error|Build" | tail -3; test -x .build/release/tokenguard'
stage "leak check (valgrind, release build)" 600 bash scripts/leak-check.sh 200
# The test bundle scripts/test.sh builds (debug, ThreadSanitizer): nothing to do after it, the whole build when this
# script runs alone.
stage "build (debug under ThreadSanitizer: the test bundle)" 1800 bash -c 'set -o pipefail; swift build --sanitize=thread --scratch-path .build-tsan --product tokenguardPackageTests 2>&1 | grep -E "error|Build" | tail -3'
# The end-to-end tests again, against the binary users run (a release build once read a PEM from freed memory
# while the debug tests passed). The test product is the one scripts/test.sh built (debug, ThreadSanitizer).
stage "end-to-end tests against the release binary" 900 bash -c 'set -o pipefail; TSAN_OPTIONS=halt_on_error=1 TOKENGUARD_BIN=.build/release/tokenguard swift test --skip-build --sanitize=thread --scratch-path .build-tsan --filter "TokenGuardServerTests|TokenGuardCLITests" 2>&1 | tee .build/release-e2e.txt | grep -E "✘|Test run|WARNING: ThreadSanitizer" | tail -20'
stage "deploy manifests (offline schemas)" 600 bash scripts/validate-deploy.sh
stage "container image (Dockerfile vs manifest, Debian root run)" 1200 env CI="${CI:-}" bash scripts/check-image.sh
stage "OpenAPI against the live server (schemathesis)" 900 env TOKENGUARD_BIN=.build/release/tokenguard bash scripts/api-fuzz.sh
stage "fuzz every target (20 s each)" 1200 bash scripts/fuzz.sh --all 20
# `swift run` takes no --static-swift-stdlib: the bench is built, then run. Without the jwt-kit peers (their BoringSSL
# is four minutes of a clean build): the targets that compare with jwt-kit say "not measured"; `swift run -c release
# bench` builds and measures them.
stage "benchmark (--quick, without the jwt-kit peers)" 1200 bash -c 'export TOKENGUARD_BENCH_PEERS=off; swift build -c release --static-swift-stdlib --product bench 2>&1 | grep -E "error|Build" | tail -3; test -x .build/release/bench && .build/release/bench --quick --json .build/bench-quick.json'
stage "soak (90 s)" 600 bash scripts/soak.sh 90
stage "fleet: namespaces, HAProxy, faults (8 s per scenario)" 900 env CI="${CI:-}" bash scripts/fleet-test.sh 8
stage "abuse (10 s per scenario)" 600 bash scripts/abuse.sh 10
stage "AddressSanitizer (optimised build)" 1800 bash scripts/sanitize.sh address
stage_summary
