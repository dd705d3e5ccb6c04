#!/usr/bin/env bash
# build.sh OUT_DIR — bench_wasm.c and the device core built with emcc -O3 -msimd128 -pthread into OUT_DIR: bench_wasm.js
# (+ .wasm, .worker.js) for the page (bench/wasm/page.html: the model written into emscripten's memory file system)
# and bench_wasm_node.js for node (the host's files through NODERAWFS; --profiling-funcs keeps the function names
# for node --cpu-prof), and kernels_bench_node.js (bench/wasm/kernels_bench.c: the products alone, per weight
# type: `node --no-experimental-fetch kernels_bench_node.js [THREADS] [REPS] [TYPE...]`). Objects are kept in OUT_DIR/obj and rebuilt when their source or any header is newer (as scripts/wasm.sh). PCRE2 and cJSON
# are not linked (token ids only: the tokenizer's pre-splitting and the transports' JSON are never reached).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: bench/wasm/build.sh OUT_DIR}
mkdir -p "$out/obj"
export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}
flags=(-std=c11 -D_GNU_SOURCE -O3 -fno-math-errno -msimd128 -pthread -Iinclude -Isrc
  -isystem "$out/inc")
mkdir -p "$out/inc" && ln -sf /usr/include/pcre2.h "$out/inc/pcre2.h" && ln -sfn /usr/include/cjson "$out/inc/cjson"
core=$(ls src/{gguf,kernels,model,tokenizer,router,route,transport,common}/*.c bench/wasm/bench_wasm.c |
  grep -v -E '_(avx2|avx512|neon)\.c$' | grep -v -E '^src/transport/http\.c$')
obj() { echo "$out/obj/$(echo "${1%.c}" | tr / _).o"; }
newest_header=$(ls -t include/*.h include/tokroute/*.h src/*/*.h | head -1)
fresh() { [ "$1" -nt "$2" ] && [ "$1" -nt "$newest_header" ]; } # an object compiled since its source and every header
for f in $core; do fresh "$(obj "$f")" "$f" || echo "$f $(obj "$f")"; done |
  FLAGS="${flags[*]}" xargs -r -P "$(nproc)" -n 2 sh -c 'emcc $FLAGS -c "$0" -o "$1" || exit 255'
objs=$(for f in $core; do obj "$f"; done)
link=(-O3 -msimd128 -pthread -sPTHREAD_POOL_SIZE=4 -sPROXY_TO_PTHREAD=1 -sINITIAL_MEMORY=256MB
  -sALLOW_MEMORY_GROWTH=1 -sMAXIMUM_MEMORY=4GB -sEXIT_RUNTIME=1 -sERROR_ON_UNDEFINED_SYMBOLS=0 -lm)
emcc "${link[@]}" $objs -sENVIRONMENT=web,worker -sINVOKE_RUN=0 -sMODULARIZE=1 -sEXPORT_NAME=TokrouteBench \
  -sEXPORTED_RUNTIME_METHODS=FS,callMain -sFORCE_FILESYSTEM=1 -o "$out/bench_wasm.js" 2>"$out/link.log" ||
  { cat "$out/link.log"; exit 1; }
emcc "${link[@]}" --profiling-funcs $objs -sNODERAWFS=1 -o "$out/bench_wasm_node.js" 2>>"$out/link.log" ||
  { cat "$out/link.log"; exit 1; }
kb=$(obj bench/wasm/kernels_bench.c)
fresh "$kb" bench/wasm/kernels_bench.c || emcc "${flags[@]}" -c bench/wasm/kernels_bench.c -o "$kb"
emcc "${link[@]}" "$kb" $(for f in src/kernels/*.c src/common/error.c src/common/platform.c; do obj "$f"; done |
  grep -v -E '_(avx2|avx512|neon)\.o$') -o "$out/kernels_bench_node.js" 2>>"$out/link.log" ||
  { cat "$out/link.log"; exit 1; }
