#!/usr/bin/env bash
# newcomer.sh — what a new user does first, kept green: a fresh build directory built the way the README's
# quickstart builds (`make cli`, the part of `make demo` that builds: scripts/deps.sh, then cmake Release, then the
# tokroute target — a real compile from nothing, about 30 s of CPU; the TOKROUTE_BIN argument is not used), then,
# from a folder laid out as a checkout (build/, ../shared), `build/tokroute serve` started as the README's "An OpenAI
# server for apps" block starts it, and one completion and one chat completion through the official openai SDK
# (tests/ui/serve_openai_newcomer.mjs, the README's JS snippet with a real base URL).
# What it does not check: installing Debian packages (deps.sh only finds them present here) or `make demo`'s run,
# which tests/e2e/readme.sh runs.
set -euo pipefail
shared=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if [ ! -f "$root/tests/ui/node_modules/openai/package.json" ]; then
  (cd "$root/tests/ui" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

t0=$(date +%s)
# (a make above this one, as in `make test`, must not lend it its jobserver)
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$root" cli BUILD="$T/build" JOBS=2 >"$T/build.log" 2>&1 ||
  { tail -30 "$T/build.log" >&2; fail "make cli"; }
[ -x "$T/build/tokroute" ] || fail "make cli built no build/tokroute"
echo "fresh build: $(($(date +%s) - t0)) s"

mkdir "$T/work"
ln -s "$T/build" "$T/work/build"
ln -s "$shared" "$T/shared"
cd "$T/work"
# As the README's OpenAI block (its /tmp/oai is $T/url here, so parallel runs do not meet).
build/tokroute serve -m ../shared/models/stories260K.gguf --chat-template chatml --port 0 --ready-file "$T/url" \
  2>"$T/serve.log" &
server=$!
for _ in $(seq 1 300); do
  [ -s "$T/url" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$T/serve.log" >&2; fail "tokroute serve exited"; }
  sleep 0.1
done
[ -s "$T/url" ] || fail "tokroute serve did not come up"
node "$root/tests/ui/serve_openai_newcomer.mjs" "$(cat "$T/url")" || { cat "$T/serve.log" >&2; fail "the SDK request"; }
echo "newcomer ok"
