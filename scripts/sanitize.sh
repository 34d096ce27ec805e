#!/usr/bin/env bash
# The whole test suite built with a sanitizer, in a build folder of its own (.build-asan, .build-tsan).
#
#   scripts/sanitize.sh address    AddressSanitizer (with LeakSanitizer): out-of-bounds, use-after-free, leaks
#   scripts/sanitize.sh thread     ThreadSanitizer: data races
#
# The servers the tests start (tokenguard serve, the fake IdPs) are the sanitized builds too. Any report fails
# the run. Expect the sanitized build to take several minutes from clean on 2 cores, and the tests 2-4x longer.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:?usage: scripts/sanitize.sh address|thread}"
case "$mode" in address|thread) ;; *) echo "usage: scripts/sanitize.sh address|thread" >&2; exit 2 ;; esac
bash scripts/install-deps.sh >/dev/null
scratch=".build-asan"; [ "$mode" = thread ] && scratch=".build-tsan"
# AddressSanitizer runs on an optimised build: an escaping pointer that a debug build happens to keep alive (a
# PEM read from freed memory did) only shows with -O. ThreadSanitizer stays on debug. Both instrument every module.
config=(--sanitize="$mode")
if [ "$mode" = address ]; then config+=(-c release -Xswiftc -enable-testing); fi
swift build "${config[@]}" --product tokenguardPackageTests --scratch-path "$scratch" 2>&1 | grep -E "error|Build" | tail -3
# The tokenguard the tests start must be the instrumented one (a build that quietly lost the flags would pass).
bin_dir=$(swift build "${config[@]}" --scratch-path "$scratch" --show-bin-path)
if [ "$(nm "$bin_dir/tokenguard" 2>/dev/null | grep -c "__${mode:0:1}san_init")" -eq 0 ]; then
  echo "sanitize $mode: $bin_dir/tokenguard is not instrumented" >&2
  exit 1
fi
log="$scratch/sanitize-tests.log"
# Sanitizer reports in the servers the tests start land in their logs; the test support copies any such log here
# when it stops a server (BinaryRunner.keepSanitizerReport), and one file here fails the run.
export TOKENGUARD_SANITIZER_REPORTS="$PWD/$scratch/child-reports"
rm -rf "$TOKENGUARD_SANITIZER_REPORTS" && mkdir -p "$TOKENGUARD_SANITIZER_REPORTS"
export SWIFT_BACKTRACE=enable=no
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-suppressions.txt:print_suppressions=0"
# The tokenguard processes the tests start keep every ASan check but the exit-time leak scan: under a loaded
# run it sometimes catches OpenSSL's per-thread error state (904 bytes, ERR_STATE) of a thread exiting at the
# same moment, which fails the test with exit 1. tokenguard's own verification loop gets a full leak check
# under valgrind instead (scripts/leak-check.sh, in CI).
export TOKENGUARD_CHILD_ASAN_OPTIONS="detect_leaks=0:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
status=0
if [ "$mode" = thread ]; then
  # ThreadSanitizer slows every process 5-15x: with the end-to-end suites' servers all starting at once on two
  # cores, some took over 30 s to answer their first request. Under it the tests run one at a time, in two shards
  # of about equal length side by side: the suite waits far more than it computes (about a quarter of a core).
  # The bundle is run directly: two `swift test` in one build folder would wait for each other's lock.
  bundle="$bin_dir/tokenguardPackageTests.xctest"
  shard='\.(ServerE2ETests|CLITests|RedisProductionTests|BatchStreamTests)/'
  NO_COLOR=1 "$bundle" --testing-library swift-testing --no-parallel --filter "$shard" >"$log.1" 2>&1 &
  first=$!
  NO_COLOR=1 "$bundle" --testing-library swift-testing --no-parallel --skip "$shard" >"$log.2" 2>&1 || status=$?
  wait "$first" || status=$?
  cat "$log.1" "$log.2" >"$log"
  # Every test ran in one shard or the other: the two counts add up to the bundle's list.
  listed=$("$bundle" --testing-library swift-testing --list-tests 2>/dev/null | grep -c "/" || true)
  ran=$(grep -hoE "Test run with [0-9]+ tests" "$log.1" "$log.2" | grep -oE "[0-9]+" | awk '{ s += $1 } END { print s + 0 }')
  if [ "$ran" -ne "$listed" ] || [ "$listed" -eq 0 ]; then
    echo "sanitize thread: the shards ran $ran tests of the $listed listed" >&2
    status=1
  fi
else
  swift test "${config[@]}" --skip-build --scratch-path "$scratch" >"$log" 2>&1 || status=$?
fi
# (The greps below only show what happened: one that finds nothing must not end the script before its verdict.)
grep -E "Test run with|ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|SUMMARY" "$log" | sort | uniq -c | head -20 || true
child_reports=$(find "$TOKENGUARD_SANITIZER_REPORTS" -type f | head -20)
if [ "$status" -ne 0 ] || [ -n "$child_reports" ] || grep -qE "ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer" "$log"; then
  grep -E -A30 "ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer" "$log" | head -80 || true
  for report in $child_reports; do
    echo "--- a server's log with a sanitizer report: $report"
    grep -E -A40 "ERROR: AddressSanitizer|WARNING: ThreadSanitizer" "$report" | head -60 || true
  done
  # A failed expectation or a thrown error with no sanitizer report: name the test and what it recorded.
  grep -E "✘|recorded an issue|Caught error|error:" "$log" | grep -v "passed after" | head -40 || true
  echo "sanitize $mode: FAILED (log: $log)" >&2
  exit 1
fi
echo "sanitize $mode: the test suite passed with no reports"
