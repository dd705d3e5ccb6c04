#!/usr/bin/env bash
# ui_browser.sh — runs the web UI's browser test (tests/ui/ui.test.mjs: headless Chromium through playwright-core)
# against this build's tokroute; screenshots go to ui-artifacts/ beside the binary. The npm packages come from
# scripts/deps.sh (make's set-up); when they are missing this installs them (npm ci) rather than skip.
set -euo pipefail
cli=$(realpath "$1")
shared=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
artifacts=$(dirname "$cli")/ui-artifacts
if [ ! -f "$root/tests/ui/node_modules/playwright-core/package.json" ]; then
  (cd "$root/tests/ui" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
rm -rf "$artifacts"
exec node "$root/tests/ui/ui.test.mjs" "$cli" "$shared" "$artifacts"
