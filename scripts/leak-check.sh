#!/usr/bin/env bash
# Runs a loop of accepted and rejected verifications (key sets parsed and freed each round) under valgrind, on the
# release build users run, and fails on any definite leak or any memory error valgrind reports (a read of freed
# memory among them). Usage: scripts/leak-check.sh [ROUNDS] (default 300: a few thousand verifications).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-300}"
bash scripts/install-deps.sh >/dev/null
# The release build every other stage uses (static Swift runtime); the leak loop is a small target on top of it.
swift build -c release --static-swift-stdlib --product leakloop 2>&1 | grep -E "error|Build" | tail -3
work=.build/leak-check
rm -rf "$work" && mkdir -p "$work"
# valgrind 3.19 cannot read the DWARF 5 Swift emits: a copy without debug information keeps the symbol table, so
# reports still name functions.
objcopy --strip-debug .build/release/leakloop "$work/leakloop"
# Generating 2048-bit RSA keys under valgrind takes half a minute: OpenSSL makes them natively, the loop loads them.
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/rs.pem" 2>/dev/null
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/ps.pem" 2>/dev/null
log="$work/valgrind.log"
valgrind --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite --error-exitcode=9 \
  "$work/leakloop" "$rounds" "$work/rs.pem" "$work/ps.pem" 2>"$log" || { status=$?; tail -60 "$log"; exit "$status"; }
grep -E "definitely lost|indirectly lost|ERROR SUMMARY" "$log"
echo "leak check: no definite leaks and no memory errors in $rounds rounds"
