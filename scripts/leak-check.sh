#!/usr/bin/env bash
# Runs a loop of accepted and rejected verifications (key sets parsed and freed each round) under valgrind and
# fails on any definite leak. Usage: scripts/leak-check.sh [ROUNDS] (default 300: a few thousand verifications).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-300}"
bash scripts/install-deps.sh
# valgrind 3.19 cannot read the DWARF 5 that Swift emits by default: build with DWARF 4 in a folder of its own.
swift build --product leakloop --scratch-path .build-leak -Xswiftc -dwarf-version=4 -Xcc -gdwarf-4 >/dev/null
log=.build/leak-check.log
valgrind --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite --error-exitcode=9 \
  .build-leak/debug/leakloop "$rounds" 2>"$log" || { status=$?; tail -60 "$log"; exit "$status"; }
grep -E "definitely lost|indirectly lost|ERROR SUMMARY" "$log"
echo "leak check: no definite leaks in $rounds rounds"
