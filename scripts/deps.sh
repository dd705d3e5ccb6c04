#!/usr/bin/env bash
# deps.sh — installs the Debian packages tokroute builds and tests with, when any is missing.
# Run as root it installs them (apt-get); otherwise it names what is missing and fails.
set -euo pipefail
packages=(cmake make gcc pkg-config libcjson-dev libcurl4-openssl-dev libmicrohttpd-dev libpcre2-dev libcmocka-dev
  python3 bsdutils binutils)  # the tests run: python3 (e2e checks), script (bsdutils: a pseudo-terminal), nm (binutils)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "tokroute: missing Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "tokroute: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
