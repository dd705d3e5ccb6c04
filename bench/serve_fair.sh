#!/usr/bin/env bash
# serve_fair.sh — `tokroute serve` against llama.cpp's llama-server under the same honest load (numbers for the
# README, not a test): N = 1, 4, 16 concurrent sessions, each call appending 8 token ids and asking for one token
# (bench/serve_fair_client.py: tokroute's session protocol sends only the new ids; llama-server gets the whole
# growing id prompt on /completion with cache_prompt, n_predict 1, one slot per client (-np N), continuous
# batching). Same model file, same thread count. The servers alternate within each round (and which goes first
# alternates between rounds), so a noisy machine's bursts hit both; the table gives the median over rounds and the
# spread (min-max).
# usage: bench/serve_fair.sh [--build DIR] [-t THREADS] [--rounds R] [--duration S] [--sessions "1 4 16"]
#                            [--model FILE] [--baseline DIR] [--no-llama]
#   default model: the Qwen2.5-0.5B-shaped Q4_0 synth file in ~/.cache/tokroute/synth (written when missing).
#   --baseline DIR: also DIR/tokroute ("before"), alternating with the others, for a before/after table;
#   --no-llama: tokroute alone (quick iterations; the table's comparison needs llama-server).
set -euo pipefail
build=build threads=2 rounds=3 duration=20 sessions="1 4 16" model= baseline= llama=1
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --sessions) sessions=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --no-llama) llama=; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "serve_fair: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
tokroute=$build/tokroute
[ -x "$tokroute" ] || { echo "serve_fair: build tokroute first ($tokroute missing)" >&2; exit 1; }
[ -z "$baseline" ] || [ -x "$baseline/tokroute" ] || { echo "serve_fair: $baseline/tokroute missing" >&2; exit 1; }
bin=
[ -z "$llama" ] || bin=$("$here/../scripts/llamacpp.sh" llama-server)
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

start_before() { start_tokroute "$1" "$baseline/tokroute"; }

start_tokroute() { # N [BINARY]
  rm -f "$tmp/ready"
  "${2:-$tokroute}" serve -m "$model" --port 0 --ready-file "$tmp/ready" -t "$threads" -c $ctx --quiet \
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
    order="tokroute${baseline:+ before}${llama:+ llama}"
    [ $((r % 2)) = 1 ] || order=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')
    for kind in $order; do
      "start_$kind" "$n"
      client=$kind
      [ "$kind" = before ] && client=tokroute
      line=$(python3 "$here/serve_fair_client.py" --kind $client --port "$port" --sessions "$n" \
        --duration "$duration" --max-len $ctx --tag "r$r")
      [ "$kind" = before ] && line=${line/\"kind\": \"tokroute\"/\"kind\": \"before\"}
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
names = {"tokroute": "tokroute", "before": "tokroute before", "llama": "llama-server"}
kinds = [k for k in names if any(r["kind"] == k for r in rows)]
def ratio(a, b, n):  # median (min–max) of the rounds' paired ratios
    v = sorted(x["calls_per_s"] / y["calls_per_s"] for x, y in
               zip([r for r in rows if r["kind"] == a and r["sessions"] == n],
                   [r for r in rows if r["kind"] == b and r["sessions"] == n]))
    return f"{cell(statistics.median(v), v[0], v[-1], '.2f')}x"
pairs = [(a, "llama") for a in ("tokroute", "before") if a in kinds and "llama" in kinds]
print()
print("| sessions | " + " | ".join(f"{names[k]} calls/s" for k in kinds) + "".join(
    f" | {names[a]} / llama-server" for a, _ in pairs) + " | " + " | ".join(f"{names[k]} p50 / p99 ms" for k in kinds)
    + " | errors |")
print("|---|" + "---|" * (2 * len(kinds) + len(pairs) + 1))
for n in sorted({r["sessions"] for r in rows}):
    calls = [cell(*stat(k, n, "calls_per_s"), '.2f') for k in kinds]
    lat = [f"{stat(k, n, 'p50_ms')[0]:.0f} / {cell(*stat(k, n, 'p99_ms'), '.0f')}" for k in kinds]
    err = sum(r["errors"] for r in rows if r["sessions"] == n)
    print(f"| {n} | " + " | ".join(calls) + "".join(f" | {ratio(a, b, n)}" for a, b in pairs) + " | "
          + " | ".join(lat) + f" | {err} |")
EOF
