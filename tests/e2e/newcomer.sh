#!/usr/bin/env bash
# newcomer.sh — what a new user does first, kept green: a fresh build directory built the way the README's
# quickstart builds (`make cli`, the part of `make demo` that builds: scripts/deps.sh, then cmake Release, then the
# tokroute target — a real compile from nothing, about 30 s of CPU; the TOKROUTE_BIN argument is not used) with only
# scripts/deps.sh build's packages: cmocka (a test tool) hidden from pkg-config, as on a machine where `make demo`
# runs first (issue 30: CMake stopped at pkg_check_modules(CMOCKA)); a test build's configure (TR_TESTS=ON) must
# then fail naming cmocka, never quietly build no tests, and once cmocka is there `make test`'s configure of the same
# build directory finds the tests and recompiles nothing of the CLI (scripts/fresh-root.sh runs the real thing in a
# minimal Debian root, in CI). Then,
# from a folder laid out as a checkout (build/, ../shared), `build/tokroute serve` started as the README's "An OpenAI
# server for apps" block starts it, and one completion and one chat completion through the official openai SDK
# (tests/ui/serve_openai_newcomer.mjs, the README's JS snippet with a real base URL).
# What it does not check: installing Debian packages (deps.sh only finds them present here; scripts/fresh-root.sh
# does) or `make demo`'s run, which tests/e2e/readme.sh runs.
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

# pkg-config as it answers on a machine without libcmocka-dev: every module this one has but cmocka.
mkdir "$T/pkgconfig"
IFS=: read -r -a pc_dirs <<<"$(pkg-config --variable pc_path pkg-config)"
for d in "${pc_dirs[@]}"; do
  for f in "$d"/*.pc; do
    [ -e "$f" ] && [ "${f##*/}" != cmocka.pc ] && [ ! -e "$T/pkgconfig/${f##*/}" ] && ln -s "$f" "$T/pkgconfig/"
  done
done
no_cmocka=(env PKG_CONFIG_LIBDIR="$T/pkgconfig")
"${no_cmocka[@]}" pkg-config --exists libcjson libcurl libmicrohttpd libpcre2-8 || fail "the build's modules not linked"
! "${no_cmocka[@]}" pkg-config --exists cmocka || fail "cmocka still visible to pkg-config"
pkg-config --exists cmocka || fail "cmocka not installed here (scripts/deps.sh test installs it)"

t0=$(date +%s)
# (a make above this one, as in `make test`, must not lend it its jobserver)
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PKG_CONFIG_LIBDIR="$T/pkgconfig" \
  make -C "$root" cli BUILD="$T/build" JOBS=2 >"$T/build.log" 2>&1 ||
  { tail -30 "$T/build.log" >&2; fail "make cli without cmocka"; }
[ -x "$T/build/tokroute" ] || fail "make cli built no build/tokroute"
echo "fresh build without cmocka: $(($(date +%s) - t0)) s"

# A test build without cmocka fails loudly, naming it.
if "${no_cmocka[@]}" cmake -S "$root" -B "$T/build-on" -DTR_TESTS=ON >"$T/on.log" 2>&1; then
  fail "a TR_TESTS=ON configure without cmocka succeeded"
fi
grep -q "cmocka was not found" "$T/on.log" ||
  { tail -20 "$T/on.log" >&2; fail "TR_TESTS=ON failed without naming cmocka"; }
# With cmocka (scripts/deps.sh test has run), make test's configure of the same build finds the tests, and the CLI
# stays built; so does make cli's again.
cmake -S "$root" -B "$T/build" -DTR_TESTS=ON >"$T/reconf.log" 2>&1 ||
  { cat "$T/reconf.log" >&2; fail "TR_TESTS=ON configure"; }
n=$(cd "$T/build" && ctest -N | sed -n 's/^Total Tests: //p')
[ "${n:-0}" -gt 0 ] || fail "TR_TESTS=ON configured no tests"
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$root" cli BUILD="$T/build" JOBS=2 >"$T/rebuild.log" 2>&1 ||
  { tail -30 "$T/rebuild.log" >&2; fail "make cli after TR_TESTS=ON"; }
! grep 'Building C object' "$T/rebuild.log" || fail "switching TR_TESTS (AUTO, ON, AUTO) recompiled the CLI"
echo "TR_TESTS=ON without cmocka refused; with it $n tests configured, the CLI not recompiled"

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
