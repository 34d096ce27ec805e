#!/usr/bin/env bash
# The soak test: the real server (release build) under sustained load on 127.0.0.1 for SECONDS (default 600)
# with valid, expired, forged and malformed tokens while a local IdP rotates keys, fails with 500s, goes
# slow and comes back. Every verdict is checked; resident memory is sampled. Loopback only, bounded in time
# (SECONDS) and count (50 million requests).
#
#   scripts/soak.sh [SECONDS]          report on stdout, JSON in .build/soak.json; exit 1 on any wrong verdict,
#                                      unexpected 5xx, lost request or memory growth
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
bash scripts/install-deps.sh >/dev/null
swift build -c release --static-swift-stdlib --product tokenguard 2>&1 | grep -E "error|Compiling|Build" | tail -3
swift build -c release --static-swift-stdlib --product stress 2>&1 | grep -E "error|Compiling|Build" | tail -3
mkdir -p .build
.build/release/stress soak "$seconds" --json .build/soak.json
