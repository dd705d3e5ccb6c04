#!/usr/bin/env bash
# simd128_kernels.sh SOURCE_DIR [OUT_DIR] — the WebAssembly SIMD128 kernels against the scalar ones and a float64
# reference, for every weight type and the other SIMD128 kernels, on one and two threads (pthreads on node's
# SharedArrayBuffer): tests/neon/neon_check.c built for simd128 with emcc and run under node; then the load-time
# Q5_0 -> Q8_0 conversion's exactness (tests/wasm/convert_check.c). The CTest test
# simd128_kernels (make test) and scripts/check-portable.sh both run it. Without emcc or node it fails, never
# skips (scripts/deps.sh test installs emscripten and node-acorn). node needs --no-experimental-fetch for
# emscripten 3.1.6 to read the .wasm from disk, and Debian's acorn on NODE_PATH for emcc itself.
set -euo pipefail
src=$(cd "${1:?usage: simd128_kernels.sh SOURCE_DIR [OUT_DIR]}" && pwd)
for tool in emcc node; do
  command -v "$tool" >/dev/null ||
    { echo "simd128_kernels: FAILED: no $tool (scripts/deps.sh test installs emscripten and nodejs)" >&2; exit 1; }
done
[ -d /usr/share/nodejs/acorn ] ||
  { echo "simd128_kernels: FAILED: no /usr/share/nodejs/acorn (apt-get install node-acorn)" >&2; exit 1; }
export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}
if [ -n "${2:-}" ]; then out=$2; mkdir -p "$out"; else out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; fi
kernels=$(ls "$src"/src/kernels/*.c | grep -v -E '_(avx2|avx512|neon)\.c$')
emcc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wshadow -Wno-unused-parameter -fno-math-errno -Werror \
  -I"$src/include" -I"$src/src" -msimd128 -pthread -sPTHREAD_POOL_SIZE=2 -sINITIAL_MEMORY=256MB -sEXIT_RUNTIME=1 \
  '-DCHECK_ISA="simd128"' "$src/tests/neon/neon_check.c" $kernels "$src/src/common/error.c" \
  "$src/src/common/platform.c" -lm -o "$out/simd128_check.js"
(cd "$out" && node --no-experimental-fetch simd128_check.js) >"$out/simd128.log" 2>&1 ||
  { cat "$out/simd128.log"; echo "simd128_kernels: the SIMD128 kernels FAILED under node" >&2; exit 1; }
grep -v '^ok ' "$out/simd128.log" || true
echo "simd128_kernels: under node $(node --version): $(tail -1 "$out/simd128.log")"
# The load-time Q5_0 -> Q8_0 conversion (convert_wasm.c): exact values, bit-identical products (tests/wasm/convert_check.c).
emcc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wshadow -Wno-unused-parameter -fno-math-errno -Werror \
  -I"$src/include" -I"$src/src" -msimd128 -pthread -sPTHREAD_POOL_SIZE=2 -sINITIAL_MEMORY=256MB -sEXIT_RUNTIME=1 \
  "$src/tests/wasm/convert_check.c" $kernels "$src/src/common/error.c" "$src/src/common/platform.c" -lm \
  -o "$out/convert_check.js"
(cd "$out" && node --no-experimental-fetch convert_check.js) >"$out/convert.log" 2>&1 ||
  { cat "$out/convert.log"; echo "simd128_kernels: the Q5_0 -> Q8_0 conversion FAILED under node" >&2; exit 1; }
echo "simd128_kernels: $(tail -1 "$out/convert.log")"
