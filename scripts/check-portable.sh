#!/usr/bin/env bash
# check-portable.sh — the device core builds beyond glibc on x86-64: every one of its files must compile with gcc,
# with clang and with musl-gcc, C11, warnings as errors, with the Linux calls of src/common/platform.c (and that
# file again with its portable fallbacks, -DTR_PLATFORM_GENERIC, which test_platform_generic runs); and with
# emscripten (wasm32) every file but the x86/NEON kernels and the curl transport (the browser's fetch replaces it),
# then the SIMD128 kernels' checks run under node, and the core linked into one wasm32 program (with PCRE2 and
# cJSON built for wasm32: scripts/wasm-libs.sh) decodes greedily as the native build does (below). Missing tools
# are installed when running as root. About 3 minutes on 2 busy cores (plus 1 once for the wasm32 libraries).
#
# The device core is what a device runs the routed loop with: src/gguf, src/kernels, src/model, src/tokenizer,
# src/router, src/route, src/transport (the backend interface and its clients) and src/common (the C API lives in
# these). Not in it: src/server, src/ui, src/cli, src/eval and src/train (the LLM's side and the tools).
# musl's and emscripten's compilers search only their own sysroots, so the libraries' headers the core includes
# (cJSON, PCRE2, curl) are offered to them alone from a directory of links, never the whole /usr/include (glibc's).
set -euo pipefail
cd "$(dirname "$0")/.."
install() {
  [ "$(id -u)" -eq 0 ] || { echo "check-portable: missing $* (apt-get install $*)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
}
command -v clang >/dev/null || install clang
command -v musl-gcc >/dev/null || install musl-tools
command -v emcc >/dev/null || install emscripten
command -v dpkg-source >/dev/null || install dpkg-dev # apt-get source (scripts/wasm-libs.sh)
# Debian's emscripten 3.1.6 with this image's Node needs Debian's acorn on NODE_PATH.
[ -d /usr/share/nodejs/acorn ] || install node-acorn
export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}
for h in /usr/include/cjson/cJSON.h /usr/include/pcre2.h; do [ -f "$h" ] || install libcjson-dev libpcre2-dev; done
find_curl() { dirname "$(find /usr/include -path '*curl/curl.h' | head -1)"; }
curl_dir=$(find_curl)
[ "$curl_dir" != . ] || { install libcurl4-openssl-dev; curl_dir=$(find_curl); }

SHARED_DIR=${SHARED_DIR:-$(cd .. && pwd)/shared}
[ -f "$SHARED_DIR/models/stories260K.gguf" ] ||
  { echo "check-portable: no $SHARED_DIR/models (../shared)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc"
ln -s /usr/include/cjson "$out/inc/cjson"
ln -s /usr/include/pcre2.h "$out/inc/pcre2.h"
ln -s "$curl_dir" "$out/inc/curl"

core=$(ls src/{gguf,kernels,model,tokenizer,router,route,transport,common}/*.c)
flags=(-std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wshadow -Wno-unused-parameter -fno-math-errno -Werror
  -Iinclude -Isrc)
n=0
# compile NAME CC FILES... [-- EXTRA FLAGS]: one object per file, in parallel (xargs), each a failure on a warning.
compile() {
  local name=$1 cc=$2; shift 2
  local files=() extra=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do files+=("$1"); shift; done
  [ $# -gt 0 ] && shift && extra=("$@")
  mkdir -p "$out/$name"
  local start=$SECONDS
  printf '%s\n' "${files[@]}" | CC="$cc" OUTDIR="$out/$name" xargs -P "$(nproc)" -I{} bash -c \
    'f={}; case "$f" in *_avx512.c) x="-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni";;
       *_avx2.c) x="-mavx2 -mfma -mf16c";; *) x="";; esac
     $CC "$@" $x -c "$f" -o "$OUTDIR/$(basename "$f" .c).o" || { echo "check-portable: $f FAILED" >&2; exit 255; }' \
    _ "${flags[@]}" "${extra[@]}" || { echo "check-portable: $name FAILED" >&2; exit 1; }
  n=$((n + ${#files[@]}))
  echo "check-portable: $name: ${#files[@]} files compiled ($((SECONDS - start)) s)"
}
native=$(echo "$core" | grep -v -E '_neon\.c$|http_fetch\.c$') # http_fetch.c: emscripten's transport
gnu=-Wno-format-truncation # as CMakeLists.txt gives gcc
compile gcc gcc $native -- $gnu
compile gcc-generic gcc src/common/platform.c -- $gnu -DTR_PLATFORM_GENERIC # the one file it changes
compile clang clang $native
compile musl musl-gcc $native -- $gnu -isystem "$out/inc"
wasm=$(echo "$core" | grep -v -E '_(avx2|avx512|neon)\.c$' | grep -v -E '^src/transport/http\.c$')
compile emscripten emcc $wasm -- -isystem "$out/inc" -msimd128 -pthread
# The WebAssembly SIMD128 kernels against the scalar ones and a float64 reference under node (also a CTest test).
./tests/wasm/simd128_kernels.sh . "$out/simd128" | sed 's/^simd128_kernels:/check-portable: simd128 kernels:/'

# The device core linked into one wasm32 program (tests/wasm/greedy_ids.c: the public C API, a model, greedy
# decoding) on 2 threads under node must pick the native build's ids, token for token, on random-weight models of
# real architectures (tr_synth_write) in the types the SIMD128 kernels cover and on the shared llama pair. Every
# symbol resolves: PCRE2 and cJSON come built for wasm32 from Debian's sources (scripts/wasm-libs.sh, cached).
# Logits differ by the summation order (AVX2/AVX-512 with interleaved rows natively, SIMD128 here): up to 0.06
# measured over 32 tokens; 0.15 allowed.
native_objs=$(ls "$out"/gcc/*.o)
gcc "${flags[@]}" $gnu -c tests/wasm/greedy_ids.c -o "$out/greedy_ids.o"
gcc "$out/greedy_ids.o" $native_objs -lpcre2-8 -lcjson -lcurl -lm -lpthread -o "$out/greedy_native"
emcc "${flags[@]}" -msimd128 -pthread -c tests/wasm/greedy_ids.c -o "$out/greedy_ids_wasm.o"
wasm_libs=$(scripts/wasm-libs.sh)
emcc -O2 -msimd128 -pthread -sPTHREAD_POOL_SIZE=2 -sINITIAL_MEMORY=512MB -sEXIT_RUNTIME=1 -sNODERAWFS=1 \
  "$out/greedy_ids_wasm.o" "$out"/emscripten/*.o -L"$wasm_libs/lib-mt" -lpcre2-8 -lcjson -lm -o "$out/greedy.js" \
  2>"$out/link.log" ||
  { cat "$out/link.log" >&2; echo "check-portable: the wasm32 device core does not link (unresolved symbols?)" >&2; exit 1; }
models=("$SHARED_DIR/models/stories260K.gguf")
for spec in tiny:q4_0 tiny:q8_0 tiny:q5_0 gemma3-tiny:q4_k_m gemma3-tiny:iq4_xs qwen3.5-tiny:q4_0; do
  "$out/greedy_native" --synth "${spec%%:*}" "${spec#*:}" "$out/${spec/:/-}.gguf"
  models+=("$out/${spec/:/-}.gguf")
done
for m in "${models[@]}"; do
  "$out/greedy_native" "$m" 32 2 >"$out/native.txt"
  (cd "$out" && node --no-experimental-fetch greedy.js "$m" 32 2 >"$out/wasm.txt") ||
    { echo "check-portable: greedy_ids under node FAILED on $m" >&2; exit 1; }
  diff <(cut -d' ' -f1 "$out/native.txt") <(cut -d' ' -f1 "$out/wasm.txt") >/dev/null ||
    { paste "$out/native.txt" "$out/wasm.txt"; echo "check-portable: wasm ids differ from native on $m" >&2; exit 1; }
  worst=$(paste "$out/native.txt" "$out/wasm.txt" |
    awk '{d = $2 - $4; if (d < 0) d = -d; if (d > w) w = d} END {print w + 0}')
  awk -v w="$worst" 'BEGIN {exit !(w <= 0.15)}' ||
    { echo "check-portable: wasm logits differ by $worst on $m (0.15 allowed)" >&2; exit 1; }
  echo "check-portable: wasm32 greedy ids = native over 32 tokens on $(basename "$m") (logits within $worst)"
done
# Q5_0 becomes Q8_0 at load in wasm (src/kernels/convert_wasm.c), exactly: the same ids and bit-identical logits
# as the Q5_0 kept (TOKROUTE_CONVERT=0).
(cd "$out" && node --no-experimental-fetch greedy.js "$out/tiny-q5_0.gguf" 32 2 TOKROUTE_CONVERT=0 >"$out/wasm-q5.txt") ||
  { echo "check-portable: greedy_ids under node FAILED on tiny-q5_0 kept as Q5_0" >&2; exit 1; }
(cd "$out" && node --no-experimental-fetch greedy.js "$out/tiny-q5_0.gguf" 32 2 >"$out/wasm-q8.txt") &&
  cmp -s "$out/wasm-q5.txt" "$out/wasm-q8.txt" ||
  { paste "$out/wasm-q5.txt" "$out/wasm-q8.txt"; echo "check-portable: Q5_0 converted to Q8_0 changed the logits" >&2; exit 1; }
echo "check-portable: wasm32 Q5_0 converted to Q8_0 at load: ids and logits bit-identical to Q5_0 kept"
emcc_version=$(emcc --version | sed -n 1p | grep -o '[0-9][0-9.]*' | head -1)
echo "check-portable: $n compilations of the device core passed ($(gcc --version | sed -n 1p);" \
  "$(clang --version | sed -n 1p); musl $(dpkg-query -W -f '${Version}' musl-tools 2>/dev/null); emcc $emcc_version)"
