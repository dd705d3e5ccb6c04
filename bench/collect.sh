#!/usr/bin/env bash
# collect.sh — what collecting router-training data costs with the LLM behind each backend (issue 18): the same
# collect (TinyStories, teacher forced) with the LLM embedded, behind `tokroute serve` (--server: one scoring
# request per example, vLLM's prompt_logprobs shape) and behind llama.cpp's server (--llamacpp: one request per
# position, spread over its slots), all on 127.0.0.1. Prints positions/s and requests per backend and the ratio to
# the embedded collect. Same threads everywhere: the collect's SLM and the LLM (embedded or its server) get T each.
# A benchmark, not a test: run it on a quiet machine and compare ratios within one run.
#   pairs: demo (stories-student + stories260K, ../shared/models) or synth (random weights of real shapes made by
#   `tokroute synth`: qwen2.5-0.5b Q8_0 SLM, qwen2.5-1.5b Q8_0 LLM; tokenizer shared; llama.cpp left out: a synthetic
#   vocabulary decodes to bytes llama.cpp's server cannot always return as text)
# usage: bench/collect.sh [BUILD_DIR] [SHARED_DIR] [demo|synth] [N_STORIES] [THREADS]
set -euo pipefail
build=${1:-build}
shared=${2:-../shared}
pair=${3:-demo}
n=${4:-100}
threads=${5:-1}
cli=$build/tokroute
root=$(cd "$(dirname "$0")/.." && pwd)
stories=$shared/data/tinystories/tinystories_val.txt
source "$root/tests/support/e2e.sh"

if [ "$pair" = synth ]; then
  slm=$tmp/slm.gguf
  llm=$tmp/llm.gguf
  "$cli" synth --shape qwen2.5-0.5b --type q8_0 -o "$slm" >/dev/null 2>&1
  "$cli" synth --shape qwen2.5-1.5b --type q8_0 -o "$llm" >/dev/null 2>&1
  max_tokens=128
else
  slm=$shared/models/stories-student.gguf
  llm=$shared/models/stories260K.gguf
  max_tokens=256
fi

embedded_pps=
measure() { # name flags...
  local name=$1
  shift
  rm -rf "$tmp/out"
  local t0 t1 json
  t0=$(date +%s.%N)
  json=$("$cli" collect --slm "$slm" "$@" --data "$stories" --format text --range 0:"$n" --max-tokens "$max_tokens" \
    -t "$threads" --out "$tmp/out" --json 2>"$tmp/err") || { cat "$tmp/err" >&2; echo "FAILED: $name" >&2; return 1; }
  t1=$(date +%s.%N)
  python3 - "$name" "$t0" "$t1" "$json" "${embedded_pps:-0}" <<'EOF'
import json, sys
name, t0, t1, j, ref = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4]), float(sys.argv[5])
secs = t1 - t0
pps = j["positions"] / secs
ratio = "%.2f×" % (pps / ref) if ref > 0 else "1.00×"
req = j.get("llm_requests", 0)
print("| %s | %d | %d | %.2f | %.0f | %s |" % (name, j["positions"], req, secs, pps, ratio))
EOF
}
echo "pair: $pair, $n stories, max $max_tokens tokens, $threads thread(s) per model"
echo "| LLM | positions | LLM requests | seconds | positions/s | vs embedded |"
echo "|---|---|---|---|---|---|"
line=$(measure embedded --llm "$llm")
echo "$line"
embedded_pps=$(echo "$line" | awk -F'|' '{print $6}' | tr -d ' ')

start_serve "$(free_port)" -t "$threads"
measure "tokroute serve (--server)" --server "$url"
measure "tokroute serve (--openai)" --openai "$url"

if [ "$pair" = demo ]; then
  bin=$("$root/scripts/llamacpp.sh" llama-server)
  for np in 1 4; do
    port=$(free_port)
    "$bin/llama-server" -m "$llm" --host 127.0.0.1 --port "$port" -t "$threads" -c $((1024 * np)) -np "$np" \
      >"$tmp/llama.log" 2>&1 &
    pids+=("$!")
    wait_http "http://127.0.0.1:$port/health" "$!" "$tmp/llama.log"
    measure "llama.cpp server -np $np (--llamacpp)" --llamacpp "http://127.0.0.1:$port"
  done
fi
