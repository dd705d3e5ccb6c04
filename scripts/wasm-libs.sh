#!/usr/bin/env bash
# wasm-libs.sh — PCRE2 and cJSON, the two libraries the device core links, built for wasm32 with emcc from Debian's
# source packages (the versions this machine's -dev packages come from), once per machine, cached outside the
# repository like llama.cpp (scripts/llamacpp.sh). Nothing third-party is vendored.
#   scripts/wasm-libs.sh        builds them if missing; prints the prefix on stdout: PREFIX/include, PREFIX/lib-mt
#                               (-pthread: atomics, for a shared-memory module) and PREFIX/lib-st (without)
# Cache: $TOKROUTE_CACHE (default ~/.cache/tokroute)/wasm-libs-<pcre2 version>-<cjson version>/; concurrent callers
# wait on a lock. `apt-get source` needs a deb-src entry: when none is configured and we run as root, one is added
# for the same mirrors and suites as the deb entries (/etc/apt/sources.list.d/tokroute-src.sources).
# PCRE2 is built the way its NON-AUTOTOOLS-BUILD describes (config.h.generic, the .dist tables), 8-bit code units,
# no JIT (there is none for wasm32: pcre2_jit_compile fails and the callers use the interpreter, as they do on a
# native build without JIT).
set -euo pipefail
cache=${TOKROUTE_CACHE:-$HOME/.cache/tokroute}
src_version() { dpkg-query -W -f '${source:Version}' "$1" 2>/dev/null || apt-cache show "$1" | sed -n 's/^Version: //p' | head -1; }
pcre2_v=$(src_version libpcre2-dev)
cjson_v=$(src_version libcjson-dev)
[ -n "$pcre2_v" ] && [ -n "$cjson_v" ] || { echo "wasm-libs: libpcre2-dev/libcjson-dev unknown to apt" >&2; exit 1; }
root=$cache/wasm-libs-$pcre2_v-$cjson_v
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
if [ -f "$root/lib-st/libpcre2-8.a" ] && [ -f "$root/lib-mt/libcjson.a" ]; then echo "$root"; exit 0; fi
command -v emcc >/dev/null || { echo "wasm-libs: emcc missing (apt-get install emscripten)" >&2; exit 1; }
command -v dpkg-source >/dev/null || { echo "wasm-libs: dpkg-source missing (apt-get install dpkg-dev)" >&2; exit 1; }

if ! grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  [ "$(id -u)" -eq 0 ] || { echo "wasm-libs: no deb-src entry for apt-get source (add one, as root)" >&2; exit 1; }
  echo "wasm-libs: adding deb-src entries (/etc/apt/sources.list.d/tokroute-src.sources)" >&2
  sed -n '/^Types:/s/.*/Types: deb-src/p; /^Types:/!p' /etc/apt/sources.list.d/debian.sources \
    >/etc/apt/sources.list.d/tokroute-src.sources
  apt-get update -qq >/dev/null
fi
work=$root/src
rm -rf "$work"
mkdir -p "$work"
# fetch_source PACKAGE VERSION: apt-get source of that version, else of another version apt lists (newest first):
# a security update's source may be missing from the mirror this machine uses (bookworm-security's pool answered
# 404 here for pcre2 10.42-1+deb12u2, so its 10.42-1 is built: the same upstream release).
fetch_source() {
  local v
  for v in "$2" $(apt-cache showsrc "$1" | sed -n 's/^Version: //p' | sort -rV); do
    (cd "$work" && apt-get source -qq "$1=$v" >>"$work/source.log" 2>&1) && { echo "wasm-libs: $1 $v" >&2; return 0; }
  done
  tail -20 "$work/source.log" >&2
  return 1
}
echo "wasm-libs: apt-get source pcre2 cjson (once per machine, cached in $root)" >&2
fetch_source pcre2 "$pcre2_v"
fetch_source cjson "$cjson_v"
pcre=$(find "$work" -maxdepth 1 -type d -name 'pcre2-*' | head -1)
cjson=$(find "$work" -maxdepth 1 -type d -name 'cjson-*' | head -1)
[ -d "$pcre" ] && [ -d "$cjson" ] || { echo "wasm-libs: unpacked sources not found in $work" >&2; exit 1; }

mkdir -p "$root/include/cjson"
cp "$pcre/src/config.h.generic" "$pcre/src/config.h"
cp "$pcre/src/pcre2.h.generic" "$pcre/src/pcre2.h"
cp "$pcre/src/pcre2_chartables.c.dist" "$pcre/src/pcre2_chartables.c"
cp "$cjson/cJSON.h" "$root/include/cjson/cJSON.h"
cp "$pcre/src/pcre2.h" "$root/include/pcre2.h"
# build VARIANT FLAGS...: both libraries into $root/lib-VARIANT (a -pthread module's objects must all be -pthread;
# a module without threads links none that is).
build() {
  local variant=$1; shift
  local obj=$work/obj-$variant lib=$root/lib-$variant
  mkdir -p "$obj" "$lib"
  emcc -O2 -msimd128 "$@" -c "$cjson/cJSON.c" -o "$obj/cJSON.o"
  emar rcs "$lib/libcjson.a" "$obj/cJSON.o"
  for f in auto_possess chartables compile config context convert dfa_match error extuni find_bracket maketables \
    match match_data newline ord2utf pattern_info script_run serialize string_utils study substitute substring \
    tables ucd valid_utf xclass jit_compile; do
    [ -f "$pcre/src/pcre2_$f.c" ] || continue
    emcc -O2 -msimd128 "$@" -DHAVE_CONFIG_H -DPCRE2_CODE_UNIT_WIDTH=8 -DPCRE2_STATIC -DSUPPORT_UNICODE -I"$pcre/src" \
      -c "$pcre/src/pcre2_$f.c" -o "$obj/pcre2_$f.o" &
  done
  wait
  emar rcs "$lib/libpcre2-8.a" "$obj"/pcre2_*.o
}
build mt -pthread
build st
rm -rf "$work"
echo "$root"
