#!/usr/bin/env bash
# deps.sh [build|test|python] — installs the Debian packages tokroute needs, when any is missing: `build` (the
# default) those the library, the CLI and the demo need; `test` also the test tools, the browser test's Chromium,
# Node.js and its npm packages; `python` the build's and the Python package's (venv, NumPy, PyTorch, pytest). Run
# as root it installs them (apt-get); otherwise it names what is missing and fails.
set -euo pipefail
what=${1:-build}
case "$what" in build|test|python) ;; *) echo "usage: scripts/deps.sh [build|test|python]" >&2; exit 2 ;; esac
packages=(cmake make gcc pkg-config libcjson-dev libcurl4-openssl-dev libmicrohttpd-dev libpcre2-dev)
if [ "$what" = test ]; then
  packages+=(libcmocka-dev python3 bsdutils binutils)  # python3 (e2e checks), script (bsdutils: a pseudo-terminal), nm
  packages+=(chromium curl)  # the web UI's browser test (headless Chromium) and HTTP test
  # emcc and the acorn its Node needs: the SIMD128 kernels' test (tests/wasm) and the browser device's test
  # (e2e_web_browser: make wasm); dpkg-dev: apt-get source's unpacker (PCRE2/cJSON for wasm32)
  packages+=(emscripten node-acorn dpkg-dev)
fi
if [ "$what" = test ] || [ "$what" = python ]; then
  # the Python package and its tests (tests/python): a venv with Debian's interpreter, NumPy, PyTorch and pytest
  packages+=(python3-venv python3-pip python3-numpy python3-torch python3-pytest)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "$what" = test ]; then
  # Node.js and npm drive the browser test; any install providing the commands will do (e.g. NodeSource's bundles npm).
  command -v node >/dev/null || missing+=(nodejs)
  command -v npm >/dev/null || missing+=(npm)
fi

# The browser test's driver, playwright-core (it uses Debian's chromium), and the official openai SDK that the
# OpenAI-compatible endpoints are tested with, pinned by tests/ui/package-lock.json.
npm_install() {
  [ "$what" = test ] || return 0
  local ui_dir
  ui_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/ui"
  [ -f "$ui_dir/node_modules/playwright-core/package.json" ] && [ -f "$ui_dir/node_modules/openai/package.json" ] && return 0
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
