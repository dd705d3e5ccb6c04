#!/usr/bin/env bash
# wasm.sh — `make wasm`: the device core built for the browser, as a static bundle in build-wasm/web/ (index.html,
# app.js, worker.js, app.css, tokroute.{js,wasm} and tokroute-st.{js,wasm}), ready for any static file server or
# `make web` (scripts/serve-web.mjs, with the COOP/COEP headers threads need). Installs emscripten and node-acorn
# when run as root; builds PCRE2 and cJSON for wasm32 once (scripts/wasm-libs.sh, cached in ~/.cache/tokroute).
#
# Two variants, because an emscripten -pthread module needs SharedArrayBuffer, which a browser gives only to a
# cross-origin isolated page: tokroute.js (-pthread, up to 4 decoding threads) and tokroute-st.js (one thread);
# the page's worker picks by self.crossOriginIsolated and says which. A pthread runs in a Web Worker of emscripten's
# pool, and one created with the pool empty would start only once this thread returns to its event loop (it never
# does inside a generation: a deadlock), so the pool holds every thread the device core can have at once: the
# kernels' pool (threads - 1 = 3), a router file's MLP pool (3) and the LLM backend's helper (1, the one that makes
# the request while the SLM keeps decoding): 7; -sPTHREAD_POOL_SIZE_STRICT=2 turns a thread beyond them into an
# error (EAGAIN, the library's message) instead of a hang. Both -msimd128 (the SIMD128 kernels), memory
# growing up to wasm32's 4 GiB. Objects are rebuilt only when a source or header is newer (build-wasm/obj-*).
# First build about 3.5 minutes on 2 cores under load 12 (two variants of ~70 files), the libraries 1 minute once;
# nothing changed: 1 s.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${WASM_BUILD:-build-wasm}
install() {
  [ "$(id -u)" -eq 0 ] || { echo "wasm: missing $* (apt-get install $*)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
}
command -v emcc >/dev/null || install emscripten
# Debian's emscripten 3.1.6 with this image's Node needs Debian's acorn on NODE_PATH.
[ -d /usr/share/nodejs/acorn ] || install node-acorn
command -v dpkg-source >/dev/null || install dpkg-dev
for h in /usr/include/cjson/cJSON.h /usr/include/pcre2.h; do [ -f "$h" ] || install libcjson-dev libpcre2-dev; done
export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}
libs=$(scripts/wasm-libs.sh)
mkdir -p "$out"
exec 9>"$out/.lock" # one build at a time in $out (make wasm beside a test run)
flock 9

core=$(ls src/{gguf,kernels,model,tokenizer,router,route,transport,common}/*.c src/wasm/*.c |
  grep -v -E '_(avx2|avx512|neon)\.c$' | grep -v -E '^src/transport/http\.c$')
flags=(-std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wshadow -Wno-unused-parameter -fno-math-errno -Werror -msimd128
  -Iinclude -Isrc -isystem "$libs/include")
newest_header=$(ls -t include/*.h include/tokroute/*.h src/*/*.h | head -1)
# objects VARIANT FLAGS...: compiles what is out of date into $out/obj-VARIANT, in parallel.
objects() {
  local variant=$1; shift
  mkdir -p "$out/obj-$variant"
  for f in $core; do
    local o="$out/obj-$variant/$(echo "${f#src/}" | tr / _ | sed 's/\.c$/.o/')"
    [ "$o" -nt "$f" ] && [ "$o" -nt "$newest_header" ] || echo "$f $o"
  done | EMFLAGS="${flags[*]} $*" xargs -r -P "$(nproc)" -n 2 sh -c \
    'emcc $EMFLAGS -c "$0" -o "$1" || { rm -f "$1"; echo "wasm: $0 FAILED" >&2; exit 255; }' ||
    { echo "wasm: compiling the $variant variant FAILED" >&2; exit 1; }
}
exports=_tb_load,_tb_unload,_tb_set_llm,_tb_generate,_tb_stop,_tb_stop_flag,_tb_message,_tb_isa,_tb_n_threads,\
_tb_router_tau,_tb_hides_round_trip,_malloc,_free
link=(-O2 -msimd128 -sALLOW_MEMORY_GROWTH=1 -sMAXIMUM_MEMORY=4GB -sINITIAL_MEMORY=64MB -sMODULARIZE=1
  -sEXPORTED_FUNCTIONS="$exports" -sEXPORTED_RUNTIME_METHODS=FS,ccall,cwrap,UTF8ToString -sENVIRONMENT=worker
  -sERROR_ON_UNDEFINED_SYMBOLS=1 -lworkerfs.js -lm)
start=$SECONDS
mkdir -p "$out/web"
# stale VARIANT OUTPUT: whether OUTPUT is missing or older than one of the variant's objects or than this script
# (its link flags).
stale() { [ ! -f "$2" ] || [ scripts/wasm.sh -nt "$2" ] || [ -n "$(find "$out/obj-$1" -name '*.o' -newer "$2" | head -1)" ]; }
objects mt -pthread
stale mt "$out/web/tokroute.wasm" &&
  emcc "${link[@]}" -pthread -sPTHREAD_POOL_SIZE=7 -sPTHREAD_POOL_SIZE_STRICT=2 -Wno-pthreads-mem-growth -sEXPORT_NAME=createTokroute \
    "$out"/obj-mt/*.o -L"$libs/lib-mt" -lpcre2-8 -lcjson -o "$out/web/tokroute.js"
objects st
stale st "$out/web/tokroute-st.wasm" &&
  emcc "${link[@]}" -sEXPORT_NAME=createTokroute "$out"/obj-st/*.o -L"$libs/lib-st" -lpcre2-8 -lcjson \
    -o "$out/web/tokroute-st.js"
cp web/* src/ui/page/app.css src/ui/page/favicon.svg "$out/web/" # the look of `tokroute ui`
echo "wasm: $out/web built ($((SECONDS - start)) s; emcc $(emcc --version | sed -n 1p | grep -o '[0-9][0-9.]*' | head -1))" >&2
