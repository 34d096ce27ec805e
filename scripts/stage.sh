# Sourced by test.sh and hardening.sh: runs named stages with a time limit each and prints their durations, so
# the CI budget stays visible. A stage that fails or overruns fails the run.
STAGE_LOG=()
stage() {
  local name="$1" limit="$2"; shift 2
  local started=$SECONDS status=0
  echo "=== $name (limit ${limit}s)"
  timeout --kill-after=30 "$limit" "$@" || status=$?
  local took=$((SECONDS - started))
  STAGE_LOG+=("$(printf '%6ss  %s' "$took" "$name")")
  if [ "$status" -ne 0 ]; then
    [ "$status" -eq 124 ] && echo "stage \"$name\" ran over its ${limit}s limit" >&2
    echo "stage \"$name\" FAILED (exit $status) after ${took}s" >&2
    stage_summary
    exit "$status"
  fi
  echo "=== $name: ${took}s"
}
stage_summary() {
  echo "--- stage durations"
  printf '%s\n' "${STAGE_LOG[@]}"
}
