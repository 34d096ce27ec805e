#!/usr/bin/env bash
# Installs the system libraries tokenguard builds against (Debian/Ubuntu). Safe to run again.
set -euo pipefail
packages=(pkg-config libssl-dev libcurl4-openssl-dev libjwt-dev libsqlite3-dev libhiredis-dev redis-server nginx haproxy nftables iproute2 openssl wrk debootstrap stunnel4 valgrind binutils ca-certificates curl)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v swift >/dev/null || { echo "swift 6 is required (https://www.swift.org/install)" >&2; exit 1; }
