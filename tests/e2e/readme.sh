#!/usr/bin/env bash
# readme.sh — every shell command in README.md and docs/*.md runs as written, so they cannot rot: each file's ```sh
# blocks, in order and in one shell, from a folder laid out as a checkout (build/tokroute, ../shared), scaled down by
# tests/support/doc_commands.py (which says how blocks are marked and what it changes). Then scripts/demo.sh, what
# `make demo` runs once built. A failing command fails the test with its block's file and line. About a minute.
set -euo pipefail
cli=$(realpath "$1")
shared=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
cleanup() {
  # servers the docs start in the background (their own shells are gone by now)
  for f in "$T"/*.pids; do [ -e "$f" ] && while read -r p; do kill "$p" 2>/dev/null || true; done <"$f"; done
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$T/work/build"
ln -s "$cli" "$T/work/build/tokroute"
ln -s "$shared" "$T/shared"
export T
for doc in "$root/README.md" "$root"/docs/*.md; do
  name=${doc#"$root"/}
  script="$T/$(basename "$doc" .md).sh"
  {
    echo 'set -euo pipefail'
    echo "PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
    echo "trap 'echo \"failed in \$BLOCK: \$BASH_COMMAND\" >&2' ERR"
    echo "trap 'jobs -p >\"\$T/$(basename "$doc" .md).pids\"' EXIT"
    (cd "$root" && python3 tests/support/doc_commands.py "$name")
  } >"$script"
  n=$(grep -c '^BLOCK=' "$script" || true)
  [ "$n" -gt 0 ] || continue
  t0=$(date +%s)
  if ! (cd "$T/work" && timeout 240 bash "$script") >"$T/out.log" 2>&1; then
    tail -25 "$T/out.log" >&2
    fail "$name: a documented command failed (above)"
  fi
  # Servers left running by the docs' own `&` are stopped here, as a reader's shell would on exit.
  [ -e "$T/$(basename "$doc" .md).pids" ] && while read -r p; do kill "$p" 2>/dev/null || true; done <"$T/$(basename "$doc" .md).pids"
  echo "ok: $name: $n blocks run in $(( $(date +%s) - t0 )) s"
done
(cd "$T/work" && timeout 120 bash "$root/scripts/demo.sh" build/tokroute ../shared) >"$T/demo.log" 2>&1 \
  || { tail -20 "$T/demo.log" >&2; fail "scripts/demo.sh (make demo)"; }
grep -q "== the LLM alone" "$T/demo.log" || fail "the demo did not run to its end"
echo "ok: scripts/demo.sh"
