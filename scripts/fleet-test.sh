#!/usr/bin/env bash
# The fleet on real hosts under faults: network namespaces this script makes (a bridge in a namespace of its own,
# one veth per host, addresses in a private /24 nothing else uses), three `tokenguard serve` replicas, Redis, an
# HTTPS IdP (nginx with a CA made here) and HAProxy, then the scenarios of `stress fleet` (replica killed, Redis
# restarted and cut off, IdP cut off, rolling restart), every answer checked. Traffic never leaves the namespaces.
# Everything is torn down on exit, failure or Ctrl-C: processes killed by pid, namespaces deleted.
#
#   scripts/fleet-test.sh [SECONDS_PER_SCENARIO]      (default 10; root, iproute2, nftables, haproxy, redis, nginx)
#
# Without root or namespaces it says "skipped" and exits 0 — except under CI=true, where that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
prefix="tgf"
net="10.231.77"
hosts=(lb:10 r1:11 r2:12 r3:13 redis:20 idp:30)

skip() {
  if [ "${CI:-}" = "true" ]; then echo "fleet-test: FAILED: $1 (under CI the fleet test must run)" >&2; exit 1; fi
  echo "fleet-test: skipped: $1"
  exit 0
}
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
for tool in ip nft haproxy redis-server nginx openssl; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/install-deps.sh installs it)"
done
ip netns add "$prefix-probe" 2>/dev/null || skip "this machine does not allow network namespaces"
ip netns exec "$prefix-probe" nft list ruleset >/dev/null 2>&1 || { ip netns del "$prefix-probe"; skip "nftables does not work in a namespace here"; }
ip netns del "$prefix-probe"
if ip -4 addr show | grep -q " $net\."; then echo "fleet-test: $net.0/24 is in use on this machine; not touching it" >&2; exit 1; fi

echo "fleet-test: building (release: tokenguard, stress)"
swift build -c release --static-swift-stdlib --product tokenguard 2>&1 | grep -E "error|Build" | tail -3
swift build -c release --static-swift-stdlib --product stress 2>&1 | grep -E "error|Build" | tail -3

dir=$(mktemp -d /tmp/tokenguard-fleet.XXXXXX)
touch "$dir/pids"
cleanup() {
  status=$?
  trap - EXIT INT TERM
  while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done < "$dir/pids"
  for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix-" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  if [ "$status" -ne 0 ] || [ -n "${FLEET_KEEP_LOGS:-}" ]; then
    mkdir -p .build/fleet-logs && cp "$dir"/*.log .build/fleet-logs/ 2>/dev/null || true
    echo "fleet-test: logs kept in .build/fleet-logs"
  fi
  rm -rf "$dir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Namespaces left by an interrupted run.
for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix-" || true); do
  for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  ip netns del "$ns"
done

echo "fleet-test: hosts in namespaces $prefix-*, subnet $net.0/24"
ip netns add "$prefix-sw"
ip netns exec "$prefix-sw" ip link set lo up
ip netns exec "$prefix-sw" ip link add br0 type bridge
ip netns exec "$prefix-sw" ip link set br0 up
for entry in "${hosts[@]}"; do
  name=${entry%%:*}; last=${entry##*:}; ns="$prefix-$name"
  ip netns add "$ns"
  ip netns exec "$prefix-sw" ip link add "p-$name" type veth peer name eth0 netns "$ns"
  ip netns exec "$prefix-sw" ip link set "p-$name" master br0 up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip addr add "$net.$last/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
done

# The IdP's certificate from a CA made for this run; tokenguard trusts it only through http.ca_file.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 \
  -subj "/CN=tokenguard fleet test CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$dir/idp.key" -out "$dir/idp.csr" -subj "/CN=idp.fleet.test" 2>/dev/null
printf "subjectAltName=IP:%s.30,DNS:idp.fleet.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n" "$net" > "$dir/idp.ext"
openssl x509 -req -in "$dir/idp.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -out "$dir/idp.pem" -days 2 \
  -extfile "$dir/idp.ext" 2>/dev/null
openssl rand -hex 24 > "$dir/redis-password"
chmod 600 "$dir/redis-password"

ip netns exec "$prefix-lb" env FLEET_NET="$net" FLEET_DIR="$dir" FLEET_PREFIX="$prefix" FLEET_TOKENGUARD="$PWD/.build/release/tokenguard" \
  .build/release/stress fleet "$seconds" --json .build/fleet.json
