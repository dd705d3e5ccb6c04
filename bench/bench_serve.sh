#!/usr/bin/env bash
# bench_serve.sh — throughput and latency of `tokroute serve` on loopback (numbers for the README, not a test):
#   1. aggregate routed tokens/s with 1, 4, 16 and 64 concurrent sessions, batched vs --no-batch (one session per
#      forward pass), each session making CALLS one-token calls after a 16-token prompt;
#   2. round trip of one routed token at context 64 and 1024: the session protocol (only the new token is sent and
#      evaluated) vs resending the whole prefix from pos 0 every call.
# usage: bench/bench_serve.sh BUILD_DIR MODEL [THREADS] [CALLS]
#   e.g. build/tokroute synth --shape qwen2.5-0.5b --type q8_0 -o /tmp/q.gguf; bench/bench_serve.sh build /tmp/q.gguf
set -euo pipefail
build=$1
model=$2
threads=${3:-0}
calls=${4:-20}
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT

start() {
  rm -f "$tmp/ready"
  "$build/tokroute" serve -m "$model" --port 0 --ready-file "$tmp/ready" -t "$threads" -c 1200 --quiet \
    --max-sessions 128 --kv-budget-mib 8192 "$@" 2>"$tmp/log" &
  pid=$!
  for _ in $(seq 600); do [ -s "$tmp/ready" ] && break; sleep 0.1; done
  [ -s "$tmp/ready" ] || { cat "$tmp/log"; exit 1; }
  url=$(cat "$tmp/ready")
}
stop() { kill -TERM $pid; wait $pid || true; pid=; }
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }

echo "model: $model, threads: ${threads} (0 = physical cores), $(nproc) CPUs"
declare -A tps
for mode in batch nobatch; do
  if [ $mode = batch ]; then start; else start --no-batch; fi
  for n in 1 4 16 64; do
    tps[$mode,$n]=$("$build/serve_load" --url "$url" --sessions $n --calls $calls --prompt-len 16 --no-rollback \
      --deadline-s 300 | field tokens_per_s)
  done
  stop
done
echo
echo "| concurrent sessions | batched tokens/s | one session per pass tokens/s | ratio |"
echo "|---|---|---|---|"
for n in 1 4 16 64; do
  python3 -c "b,u=${tps[batch,$n]},${tps[nobatch,$n]}; print(f'| $n | {b:.1f} | {u:.1f} | {b/u:.2f}x |')"
done

start
echo
echo "| context | session protocol p50 ms | resend whole prefix p50 ms |"
echo "|---|---|---|"
for ctx in 64 1024; do
  a=$("$build/serve_load" --url "$url" --sessions 1 --calls 30 --prompt-len $ctx --no-rollback | field p50_ms)
  b=$("$build/serve_load" --url "$url" --sessions 1 --calls 10 --prompt-len $ctx --resend-prefix | field p50_ms)
  echo "| $ctx | $a | $b |"
done
stop
