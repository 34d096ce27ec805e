#!/usr/bin/env bash
# libFuzzer targets for tokenguard's parsers (Fuzz/Sources), built with AddressSanitizer.
#
#   scripts/fuzz.sh --list              names every target
#   scripts/fuzz.sh TARGET [SECONDS]    fuzzes one target (default 60 s) from its seeds in Fuzz/seeds/TARGET
#   scripts/fuzz.sh --all [SECONDS]     every target, two at a time (CI: a short bounded run each)
#
# A crash, trap, leak or hang (an input over 10 s) fails the run and leaves the input in
# .build-fuzz/findings/TARGET/; turn it into a regression test (Tests/TokenGuardCoreTests/FuzzRegressionTests.swift)
# and a file in Fuzz/regressions/TARGET/, which every run replays first. The growing corpus is kept in
# .build-fuzz/corpus/TARGET between runs on one machine.
set -euo pipefail
cd "$(dirname "$0")/.."

build() {
  # lld, not the default gold: gold cannot link the fuzzer and ASan runtimes with Swift's DWARF 5.
  swift build --product tokenguard-fuzz --scratch-path .build-fuzz \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -use-ld=lld -Xswiftc -DTOKENGUARD_FUZZ 2>&1 | grep -E "error|Compiling tokenguard|Build" || true
  test -x .build-fuzz/debug/tokenguard-fuzz || { echo "fuzz build failed" >&2; exit 1; }
}

max_len() {
  case "$1" in
    jws|http-request) echo 20000 ;;  # above max_token_bytes (16384), so the size limit is crossed too
    jwks) echo 16384 ;;
    *) echo 8192 ;;
  esac
}

run_one() {
  local target="$1" seconds="$2"
  local corpus=".build-fuzz/corpus/$target" findings=".build-fuzz/findings/$target" log=".build-fuzz/fuzz-$target.log"
  mkdir -p "$corpus" "$findings"
  cp -n Fuzz/seeds/"$target"/* "$corpus"/ 2>/dev/null || true
  # Known findings first: each must now pass.
  if compgen -G "Fuzz/regressions/$target/*" >/dev/null; then
    SWIFT_BACKTRACE=enable=no .build-fuzz/debug/tokenguard-fuzz "$target" -runs=1 Fuzz/regressions/"$target"/* >"$log.regressions" 2>&1 \
      || { tail -40 "$log.regressions"; echo "fuzz $target: a regression input fails again" >&2; return 1; }
  fi
  local status=0
  SWIFT_BACKTRACE=enable=no ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" .build-fuzz/debug/tokenguard-fuzz "$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 -max_len="$(max_len "$target")" \
    -print_final_stats=1 -artifact_prefix="$findings/" "$corpus" >"$log" 2>&1 || status=$?
  local runs corpus_size
  runs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" || echo 0)
  corpus_size=$(find "$corpus" -type f | wc -l)
  if [ "$status" -ne 0 ]; then
    grep -E "ERROR|SUMMARY|fuzz property violated|Fatal error|artifact|Test unit written" "$log" | head -20
    echo "fuzz $target: FAILED after $runs executions (exit $status); input saved in $findings/" >&2
    return 1
  fi
  echo "fuzz $target: $runs executions in ${seconds}s, corpus $corpus_size inputs, no crashes"
}

case "${1:-}" in
  --list)
    build >/dev/null
    .build-fuzz/debug/tokenguard-fuzz --list ;;
  --all)
    build
    seconds="${2:-60}"
    # Two targets at a time: each fuzzer is one process on one core, and this machine class has two.
    failed=0 running=()
    for target in $(.build-fuzz/debug/tokenguard-fuzz --list | cut -f1); do
      run_one "$target" "$seconds" &
      running+=($!)
      if [ "${#running[@]}" -ge 2 ]; then
        wait "${running[0]}" || failed=1
        running=("${running[@]:1}")
      fi
    done
    for pid in "${running[@]}"; do wait "$pid" || failed=1; done
    exit "$failed" ;;
  ""|-h|--help)
    sed -n 2,12p "$0"; exit 2 ;;
  *)
    build
    run_one "$1" "${2:-60}" ;;
esac
