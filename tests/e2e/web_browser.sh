#!/usr/bin/env bash
# web_browser.sh — the browser as the device: builds the WebAssembly bundle (scripts/wasm.sh into the checkout's
# build-wasm/, what `make wasm` builds: incremental, so the release and the ASan suites build it once between them;
# PCRE2/cJSON cached in ~/.cache/tokroute) and runs tests/ui/web.test.mjs in headless Chromium
# against this build's tokroute (the LLM's server and the native reference). Fails, never skips, when emscripten
# is missing and cannot be installed (scripts/deps.sh test installs it). Screenshots go to web-artifacts/.
set -euo pipefail
cli=$(realpath "$1")
shared=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/build-wasm
artifacts=$(dirname "$cli")/web-artifacts
if [ ! -f "$root/tests/ui/node_modules/playwright-core/package.json" ]; then
  (cd "$root/tests/ui" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
"$root/scripts/wasm.sh" || { echo "FAIL: make wasm's build (scripts/wasm.sh)" >&2; exit 1; }
rm -rf "$artifacts"
exec node "$root/tests/ui/web.test.mjs" "$cli" "$shared" "$out/web" "$artifacts"
