#!/usr/bin/env bash
# Per-request counts of what the HTTP path costs in the runtime, exact and load-independent where timings on a shared
# VM are not: task switches (each one a check of the task's executor preference under a lock), swift_retain calls and
# mallocs, for /healthz, a cached POST /v1/verify and a cached forward-auth check.
# Counted with uprobes (`perf probe`, Debian's linux-perf, root) on `tokenguard serve --demo`, over N sequential
# requests on one keep-alive connection after 50 warm-up requests.
#
#   scripts/http-counts.sh [BINARY] [N] [CPUS]   (default .build/release/tokenguard, 2000, any CPU)
#
# CPUS (a taskset list such as 0) pins the server: on one CPU it has one event loop, and verifications and forward-auth
# checks are answered in the connection's pipeline (VerifyOnTheEventLoop); on more, every request takes the router.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$(realpath "${1:-.build/release/tokenguard}")
requests="${2:-2000}"
cpus="${3:-}"
[ "$(id -u)" -eq 0 ] || { echo "http-counts: uprobes need root"; exit 1; }
command -v perf >/dev/null || { echo "http-counts: perf is not installed (apt-get install linux-perf)"; exit 1; }
concurrency=$(find /opt/swift /usr -name libswift_Concurrency.so -path '*linux*' 2>/dev/null | head -1)
core=$(dirname "$concurrency")/libswiftCore.so
libc=$(ldd "$binary" | awk '/libc.so.6/ {print $3}')
events=(tgc:task_switch tgc:retain tgc:malloc)
cleanup() {
  [ -n "${server:-}" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  for event in "${events[@]}"; do perf probe -q -d "$event" 2>/dev/null || true; done
  rm -rf "$work"
}
work=$(mktemp -d)
trap cleanup EXIT
for event in "${events[@]}"; do perf probe -q -d "$event" 2>/dev/null || true; done  # left by an interrupted run
perf probe -q -x "$concurrency" 'tgc:task_switch=swift_task_switch'
perf probe -q -x "$core" 'tgc:retain=swift_retain'
perf probe -q -x "$libc" 'tgc:malloc=malloc'

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$work" && exec ${cpus:+taskset -c "$cpus"} "$binary" serve --demo --listen "127.0.0.1:$port" >"$work/demo.txt" 2>&1) &
server=$!
for _ in $(seq 100); do grep -q "Mint more" "$work/demo.txt" 2>/dev/null && break; sleep 0.2; done
token=$(grep -o '"token":"[^"]*"' "$work/demo.txt" | head -1 | cut -d'"' -f4)
nonce=$(grep -o '"nonce":"[^"]*"' "$work/demo.txt" | head -1 | cut -d'"' -f4)
[ -n "$token" ] || { echo "http-counts: the demo server did not start"; cat "$work/demo.txt"; exit 1; }

cat >"$work/client.py" <<'PY'
import json, socket, sys
port, kind, count, token, nonce = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
if kind == "verify":
    body = json.dumps({"provider": "apple", "token": token, "nonce": nonce}, separators=(",", ":")).encode()
    request = b"POST /v1/verify HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
elif kind == "forward-auth":
    request = f"GET /v1/authz/apple HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\nX-Tokenguard-Nonce: {nonce}\r\n\r\n".encode()
else:
    request = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
connection, pending = socket.create_connection(("127.0.0.1", port)), b""
for _ in range(count):
    connection.sendall(request)
    while True:
        end = pending.find(b"\r\n\r\n")
        if end >= 0:
            head = pending[:end].decode()
            length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n")[1:] if line.lower().startswith("content-length:")), 0)
            if len(pending) >= end + 4 + length:
                if not head.startswith("HTTP/1.1 200"):
                    sys.exit(f"{kind}: {head.splitlines()[0]}")
                pending = pending[end + 4 + length:]
                break
        data = connection.recv(65536)
        if not data:
            sys.exit(f"{kind}: connection closed")
        pending += data
PY

printf '%-14s %14s %10s %8s\n' request task_switches retains mallocs
for kind in healthz verify forward-auth; do
  python3 "$work/client.py" "$port" "$kind" 50 "$token" "$nonce"
  perf stat -x, -e "$(IFS=,; echo "${events[*]}")" -p "$server" -o "$work/stat.txt" &
  stat=$!
  sleep 0.5
  python3 "$work/client.py" "$port" "$kind" "$requests" "$token" "$nonce"
  kill -INT "$stat"
  wait "$stat" || true
  awk -F, -v n="$requests" -v kind="$kind" '
    /tgc:task_switch/ {s=$1} /tgc:retain/ {r=$1} /tgc:malloc/ {m=$1}
    END {printf "%-14s %14.1f %10.1f %8.1f\n", kind, s/n, r/n, m/n}' "$work/stat.txt"
done
