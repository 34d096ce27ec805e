#!/usr/bin/env bash
# Proves deploy/Dockerfile builds and runs without Docker (Docker cannot run here):
#   1. checks the Dockerfile against the manifest: every target path copied into the build stage, the build
#      image's Swift at least the manifest's tools version, every .systemLibrary provider installed in the build
#      stage, and every shared library the release binary needs (ldd) provided by a runtime-stage package (or one
#      they depend on);
#   2. builds the binary as the Dockerfile does (--static-swift-stdlib), makes a Debian bookworm root with
#      debootstrap, installs exactly the runtime stage's packages in it, and runs `tokenguard --version` and
#      `tokenguard serve --demo` inside it (chroot), verifying a minted token over loopback.
# Needs root (or password-less sudo) for debootstrap and chroot; without either, step 2 is skipped with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
dockerfile=deploy/Dockerfile
root=.build-image/rootfs
fail() { echo "check-image: $*" >&2; exit 1; }

mkdir -p .build-image
# 1. The Dockerfile against the manifest.
swift package dump-package > .build-image/manifest.json 2>/dev/null || fail "swift package dump-package failed"
python3 - "$dockerfile" .build-image/manifest.json <<'PY'
import json, re, sys
dockerfile, manifest = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
stages = re.split(r'(?m)^FROM ', dockerfile)[1:]
build, runtime = stages[0], stages[-1]
problems = []
# Swift version of the build image against the tools version.
image = re.match(r'swift:(\d+)\.(\d+)', build)
tools = open('Package.swift').readline()
want = re.search(r'swift-tools-version:\s*(\d+)\.(\d+)', tools)
if not image or not want: problems.append("cannot read the build image's Swift version or the tools version")
elif (int(image[1]), int(image[2])) < (int(want[1]), int(want[2])):
    problems.append(f"build image swift:{image[1]}.{image[2]} is older than tools version {want[1]}.{want[2]}")
# Every target's top-level folder is copied.
copied = set(m.split('/')[0] for m in re.findall(r'(?m)^COPY\s+(\S+)\s', build))
for target in manifest['targets']:
    path = target.get('path') or (('Tests/' if target['type'] == 'test' else 'Sources/') + target['name'])
    if path.split('/')[0] not in copied:
        problems.append(f"target {target['name']} lives in {path}, which the build stage does not COPY")
# Every system library's apt provider is installed in the build stage.
installed = set(re.findall(r'[a-z0-9][a-z0-9.+-]+', ' '.join(re.findall(r'apt-get install[^&]*', build))))
for target in manifest['targets']:
    for provider in target.get('providers') or []:
        for package in provider.get('apt', [[]])[0]:
            if package not in installed: problems.append(f"{target['name']} needs {package}, not installed in the build stage")
runtime_packages = sorted(set(re.findall(r'[a-z0-9][a-z0-9.+-]+', ' '.join(re.findall(r'apt-get install[^&]*', runtime)))) - {'apt-get', 'install', 'y', 'no-install-recommends'})
open('.build-image/runtime-packages', 'w').write(' '.join(p for p in runtime_packages if not p.startswith('-')))
if problems:
    print('\n'.join('check-image: ' + p for p in problems), file=sys.stderr); sys.exit(1)
print(f"check-image: Dockerfile copies every target path, builds with swift:{image[1]}.{image[2]} >= tools {want[1]}.{want[2]}, installs every system library")
PY

# The binary as the Dockerfile builds it.
swift build -c release --static-swift-stdlib --product tokenguard 2>&1 | grep -E "error|Build" | tail -2
binary=.build/release/tokenguard
[ -x "$binary" ] || fail "the static release build failed"
packages=$(cat .build-image/runtime-packages)
# Every shared library the binary needs comes from a runtime package or one of their dependencies.
provided=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances $packages 2>/dev/null \
  | grep -E '^[a-z0-9]' | sort -u)
missing=0
for lib in $(ldd "$binary" | awk '/=>/ {print $3}'); do
  owner=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -1 | cut -d: -f1) || true
  [ -n "$owner" ] || owner=$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1) || true
  [ -n "$owner" ] || { echo "check-image: no package owns $lib" >&2; missing=1; continue; }
  case "$owner" in libc6|libgcc-s1|libstdc++6) continue ;; esac
  if ! grep -qx "$owner" <<<"$provided"; then echo "check-image: $lib ($owner) is not provided by the runtime stage ($packages)" >&2; missing=1; fi
done
[ "$missing" -eq 0 ] || fail "the runtime stage misses libraries the binary needs"
echo "check-image: every shared library of the static binary comes from the runtime stage's packages ($packages)"
if ldd "$binary" | grep -q libswiftCore; then fail "the binary links the Swift runtime dynamically (expected --static-swift-stdlib)"; fi

# 2. Run it in a Debian root with exactly the runtime packages.
# Root, or password-less sudo, for debootstrap, mount and chroot.
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "check-image: skipped the Debian-root run (needs root or password-less sudo)"
    exit 0
  fi
fi
command -v debootstrap >/dev/null || PATH="$PATH:/usr/sbin:/sbin"
command -v debootstrap >/dev/null || fail "debootstrap is not installed (scripts/install-deps.sh installs it)"
if [ ! -x "$root/usr/bin/apt-get" ]; then
  $SUDO rm -rf "$root" && mkdir -p "$root"
  $SUDO debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >.build-image/debootstrap.log 2>&1 \
    || { tail -20 .build-image/debootstrap.log; fail "debootstrap failed"; }
fi
cleanup() {
  if [ -n "${server_pid:-}" ]; then $SUDO pkill -f "tokenguard serve --demo --listen 127.0.0.1:$port" 2>/dev/null; wait "$server_pid" 2>/dev/null; fi
  $SUDO umount "$root/proc" 2>/dev/null || true
  $SUDO umount "$root/dev" 2>/dev/null || true
}
trap cleanup EXIT
$SUDO mount -t proc proc "$root/proc"
$SUDO mount --bind /dev "$root/dev"
$SUDO cp /etc/resolv.conf "$root/etc/resolv.conf"
$SUDO chroot "$root" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages >/dev/null" \
  || fail "installing the runtime packages in the Debian root failed"
$SUDO install -m 0755 "$binary" "$root/usr/local/bin/tokenguard"
$SUDO chroot "$root" /usr/local/bin/tokenguard --version
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
log=$(mktemp)
$SUDO chroot "$root" /usr/local/bin/tokenguard serve --demo --listen "127.0.0.1:$port" >"$log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
mint=$(grep -oE "http://127\.0\.0\.1:[0-9]+/mint" "$log" | head -1)
[ -n "$mint" ] || { cat "$log"; fail "the demo did not start in the Debian root"; }
token=$(curl -sf "$mint?provider=apple&nonce=image-check" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
verdict=$(curl -sf "http://127.0.0.1:$port/v1/verify" -H 'Content-Type: application/json' \
  -d "{\"provider\":\"apple\",\"token\":\"$token\",\"nonce\":\"image-check\"}")
python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert v["valid"] is True, v' "$verdict" || fail "the demo in the Debian root did not verify its token: $verdict"
echo "check-image: tokenguard --version and serve --demo ran in a Debian bookworm root with only: $packages; a minted token verified"
