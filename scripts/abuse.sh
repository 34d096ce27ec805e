#!/usr/bin/env bash
# Request limits under abuse, against the real server (release build) on 127.0.0.1: slow bodies, slow headers,
# 1,000 idle connections, maximal batches, deeply nested JSON and bodies announced as 100 MB, each for
# SECONDS (default 15) while a well-behaved client measures its latency (p99 reported against no abuse).
#
#   scripts/abuse.sh [SECONDS]         report on stdout, JSON in .build/abuse.json; exit 1 when a well-behaved
#                                      request fails, an abusive one gets a wrong answer, or a limit does not hold
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-15}"
bash scripts/install-deps.sh >/dev/null
swift build -c release --static-swift-stdlib --product tokenguard 2>&1 | grep -E "error|Compiling|Build" | tail -3
swift build -c release --static-swift-stdlib --product stress 2>&1 | grep -E "error|Compiling|Build" | tail -3
mkdir -p .build
# 1,000 idle connections need as many descriptors on each side.
ulimit -n 8192 2>/dev/null || true
.build/release/stress abuse "$seconds" --json .build/abuse.json
