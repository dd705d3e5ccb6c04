#!/usr/bin/env bash
# serve_fair.sh — `tokroute serve` against llama.cpp's llama-server under the same honest load (numbers for the
# README, not a test): N = 1, 4, 16 concurrent sessions, each call appending 8 token ids and asking for one token
# (bench/serve_fair_client.py: tokroute's session protocol sends only the new ids; llama-server gets the whole
# growing id prompt on /completion with cache_prompt, n_predict 1, one slot per client (-np N), continuous
# batching). Same model file, same thread count. The servers alternate within each round (and which goes first
# alternates between rounds), so a noisy machine's bursts hit both; the table gives the median over rounds and the
# spread (min-max).
# usage: bench/serve_fair.sh [--build DIR] [-t THREADS] [--rounds R] [--duration S] [--sessions "1 4 16"]
#                            [--model FILE]
#   default model: the Qwen2.5-0.5B-shaped Q4_0 synth file in ~/.cache/tokroute/synth (written when missing).
set -euo pipefail
build=build threads=2 rounds=3 duration=20 sessions="1 4 16" model=
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --sessions) sessions=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "serve_fair: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
tokroute=$build/tokroute
[ -x "$tokroute" ] || { echo "serve_fair: build tokroute first ($tokroute missing)" >&2; exit 1; }
bin=$("$here/../scripts/llamacpp.sh" llama-server)
if [ -z "$model" ]; then
  model=${TOKROUTE_CACHE:-$HOME/.cache/tokroute}/synth/qwen2.5-0.5b-q4_0.gguf
  if [ ! -s "$model" ]; then
    mkdir -p "$(dirname "$model")"
    "$tokroute" synth --shape qwen2.5-0.5b --type q4_0 -o "$model.tmp" >/dev/null && mv "$model.tmp" "$model"
  fi
fi
ctx=512 # per session: a sequence starts over before it passes this
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_tokroute() { # N
  rm -f "$tmp/ready"
  "$tokroute" serve -m "$model" --port 0 --ready-file "$tmp/ready" -t "$threads" -c $ctx --quiet \
    --max-sessions $((4 * $1 + 8)) 2>"$tmp/log" &
  pid=$!
  for _ in $(seq 600); do [ -s "$tmp/ready" ] && break; sleep 0.1; done
  [ -s "$tmp/ready" ] || { cat "$tmp/log" >&2; exit 1; }
  port=$(sed 's/.*://; s/[^0-9].*//' "$tmp/ready")
}

start_llama() { # N
  port=$(free_port)
  "$bin/llama-server" -m "$model" -t "$threads" -tb "$threads" -np "$1" -c $(($1 * ctx)) --cont-batching \
    --host 127.0.0.1 --port "$port" >"$tmp/log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  tail -20 "$tmp/log" >&2
  exit 1
}

stop() { kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true; pid=; }

echo "model: $model, threads: $threads, rounds: $rounds, ${duration}s per run, $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
results=$tmp/results.jsonl
for r in $(seq "$rounds"); do
  for n in $sessions; do
    if [ $((r % 2)) = 1 ]; then order="tokroute llama"; else order="llama tokroute"; fi
    for kind in $order; do
      "start_$kind" "$n"
      line=$(python3 "$here/serve_fair_client.py" --kind $kind --port "$port" --sessions "$n" \
        --duration "$duration" --max-len $ctx --tag "r$r")
      stop
      echo "round $r/$rounds: $line" >&2
      echo "$line" >>"$results"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def stat(kind, n, key):
    v = [r[key] for r in rows if r["kind"] == kind and r["sessions"] == n]
    return statistics.median(v), min(v), max(v)
def cell(m, lo, hi, f):
    return f"{m:{f}} ({lo:{f}}–{hi:{f}})"
print()
print("| sessions | tokroute calls/s | llama-server calls/s | ratio | tokroute p50 / p99 ms | llama-server p50 / p99 ms | errors |")
print("|---|---|---|---|---|---|---|")
for n in sorted({r["sessions"] for r in rows}):
    t, l = stat("tokroute", n, "calls_per_s"), stat("llama", n, "calls_per_s")
    ratios = sorted(a["calls_per_s"] / b["calls_per_s"] for a, b in
                    zip([r for r in rows if r["kind"] == "tokroute" and r["sessions"] == n],
                        [r for r in rows if r["kind"] == "llama" and r["sessions"] == n]))
    tp50, tp99 = stat("tokroute", n, "p50_ms"), stat("tokroute", n, "p99_ms")
    lp50, lp99 = stat("llama", n, "p50_ms"), stat("llama", n, "p99_ms")
    err = sum(r["errors"] for r in rows if r["sessions"] == n)
    print(f"| {n} | {cell(*t, '.2f')} | {cell(*l, '.2f')} | {cell(statistics.median(ratios), ratios[0], ratios[-1], '.2f')}x "
          f"| {tp50[0]:.0f} / {cell(*tp99, '.0f')} | {lp50[0]:.0f} / {cell(*lp99, '.0f')} | {err} |")
EOF
