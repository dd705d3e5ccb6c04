#!/usr/bin/env bash
# deps.sh — installs the Debian packages tokroute builds and tests with, when any is missing.
# Run as root it installs them (apt-get); otherwise it names what is missing and fails.
set -euo pipefail
packages=(cmake make gcc pkg-config libcjson-dev libcurl4-openssl-dev libmicrohttpd-dev libpcre2-dev libcmocka-dev
  python3 bsdutils binutils)  # the tests run: python3 (e2e checks), script (bsdutils: a pseudo-terminal), nm (binutils)
packages+=(chromium curl)  # the web UI's browser test (headless Chromium) and HTTP test
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm drive the browser test; any install providing the commands will do (e.g. NodeSource's bundles npm).
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)

# The browser test's driver, playwright-core, pinned by tests/ui/package-lock.json (it uses Debian's chromium).
npm_install() {
  local ui_dir
  ui_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/ui"
  [ -f "$ui_dir/node_modules/playwright-core/package.json" ] && return 0
  echo "tokroute: installing tests/ui's npm packages" >&2
  (cd "$ui_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
}
if [ ${#missing[@]} -eq 0 ]; then
  npm_install
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "tokroute: missing Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "tokroute: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
npm_install
