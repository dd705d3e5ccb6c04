#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer targets with clang + ASan/UBSan and runs each for SECONDS (default 60), seeded
# from ../shared. Findings are written to build-fuzz/findings/. Not part of `make test` (it is open-ended).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shared=$(cd ../shared && pwd)
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTR_SANITIZE=ON -DTR_FUZZ=ON \
  -DTR_TESTS=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_gguf fuzz_tokenize fuzz_request fuzz_session_reply \
  fuzz_llamacpp_stream fuzz_score_reply fuzz_sglang_reply fuzz_dataset fuzz_train_data fuzz_json_scan \
  >/dev/null
mkdir -p build-fuzz/findings build-fuzz/corpus-gguf build-fuzz/corpus-tok build-fuzz/corpus-req build-fuzz/corpus-reply \
  build-fuzz/corpus-sse build-fuzz/corpus-score build-fuzz/corpus-sglang build-fuzz/corpus-data \
  build-fuzz/corpus-train build-fuzz/corpus-json
# Small seeds: a tiny synthetic model, a router file is made by the tests; the real student model.
[ -f build-fuzz/corpus-gguf/tiny.gguf ] || build/tokroute synth --shape tiny --type q8_0 -o build-fuzz/corpus-gguf/tiny.gguf 2>/dev/null || true
cp -n "$shared/models/stories-student.gguf" build-fuzz/corpus-gguf/ 2>/dev/null || true
awk 'BEGIN{RS="\n__ggml_vocab_test__\n"} {f=sprintf("build-fuzz/corpus-tok/t%03d", NR); printf "%s", $0 > f; close(f)}' \
  "$shared/tokenizer/ggml-vocab-gpt-2.edge.inp"
# Request bodies and server replies: the seeds in the repository (CTest replays them in every build).
cp -n tests/fuzz/seeds/request/* build-fuzz/corpus-req/
cp -n tests/fuzz/seeds/json_scan/* build-fuzz/corpus-json/
cp -n tests/fuzz/seeds/session_reply/* build-fuzz/corpus-reply/
cp -n tests/fuzz/seeds/llamacpp_stream/* build-fuzz/corpus-sse/
cp -n tests/fuzz/seeds/score_reply/* build-fuzz/corpus-score/
cp -n tests/fuzz/seeds/sglang_reply/* build-fuzz/corpus-sglang/
# Dataset files: the first byte picks the format (byte % 5: text, csqa, gsm8k, arc, mmlu), the rest is the file's start.
seed_data() { { printf "\\$(printf %03o "$1")"; head -n 8 "$2"; } >"build-fuzz/corpus-data/$3"; }
seed_data 130 "$shared/data/tinystories/tinystories_val.txt" text
seed_data 131 "$shared/data/commonsenseqa/dev_rand_split.jsonl" csqa
seed_data 132 "$shared/data/gsm8k/test.jsonl" gsm8k
seed_data 133 "$shared/data/arc_challenge/arc_challenge.jsonl" arc
seed_data 134 "$shared/data/mmlu_professional_psychology/professional_psychology_dev.csv" mmlu
# Collected data: two bytes giving positions.bin's size, then positions.bin and index.bin of a 2-story collect.
if [ ! -f build-fuzz/corpus-train/two-stories ]; then
  tmpc=$(mktemp -d)
  build/tokroute collect --slm "$shared/models/stories-student.gguf" --llm "$shared/models/stories260K.gguf" \
    --data "$shared/data/tinystories/tinystories_val.txt" --format text --range 0:2 --max-tokens 6 --topk 2 -t 1 \
    --out "$tmpc" >/dev/null 2>&1
  python3 - "$tmpc" build-fuzz/corpus-train/two-stories <<'PY'
import sys
pos = open(sys.argv[1] + "/positions.bin", "rb").read()
idx = open(sys.argv[1] + "/index.bin", "rb").read()
open(sys.argv[2], "wb").write(len(pos).to_bytes(2, "little") + pos + idx)
PY
  rm -rf "$tmpc"
fi
export TOKROUTE_SHARED=$shared
(cd build-fuzz/findings &&
  ../fuzz_gguf -max_total_time="$seconds" -max_len=300000 -rss_limit_mb=4096 ../corpus-gguf 2>&1 | tail -3 &&
  ../fuzz_tokenize -max_total_time="$seconds" -max_len=4096 ../corpus-tok 2>&1 | tail -3 &&
  ../fuzz_request -max_total_time="$seconds" -max_len=8192 ../corpus-req 2>&1 | tail -3 &&
  ../fuzz_json_scan -max_total_time="$seconds" -max_len=8192 ../corpus-json 2>&1 | tail -3 &&
  ../fuzz_session_reply -max_total_time="$seconds" -max_len=8192 ../corpus-reply 2>&1 | tail -3 &&
  ../fuzz_llamacpp_stream -max_total_time="$seconds" -max_len=8192 ../corpus-sse 2>&1 | tail -3 &&
  ../fuzz_score_reply -max_total_time="$seconds" -max_len=8192 ../corpus-score 2>&1 | tail -3 &&
  ../fuzz_sglang_reply -max_total_time="$seconds" -max_len=8192 ../corpus-sglang 2>&1 | tail -3 &&
  ../fuzz_dataset -max_total_time="$seconds" -max_len=8192 ../corpus-data 2>&1 | tail -3 &&
  ../fuzz_train_data -max_total_time="$seconds" -max_len=65536 ../corpus-train 2>&1 | tail -3)
