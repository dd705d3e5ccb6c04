#!/usr/bin/env bash
# serve_fair.sh — `tokroute serve` against llama.cpp's llama-server under the same honest load (numbers for the
# README, not a test): N = 1, 4, 16 concurrent sessions, each call appending 8 token ids and asking for one token
# (bench/serve_fair_client.py: tokroute's session protocol sends only the new ids; llama-server gets the whole
# growing id prompt on /completion with cache_prompt, n_predict 1, one slot per client (-np N), continuous
# batching). Same model file, same thread count. The servers alternate within each round (and which goes first
# alternates between rounds), so a noisy machine's bursts hit both; the table gives the median over rounds and the
# spread (min-max).
# Bursts (--bursts "64 1024"): all N sessions start together, each with a prompt of that many tokens, then 16 calls
# of +8 tokens -> 1 token (3 such bursts per run, 1 with prompts of 512 tokens or more, new sessions each; in the
# first --burst-rounds rounds); one table per prompt size: p50 / p99 over all calls (prompts included), then the
# prompts' (first calls') and the other calls' p99 apart.
# usage: bench/serve_fair.sh [--build DIR] [-t THREADS] [--rounds R] [--duration S] [--sessions "1 4 16"]
#                            [--model FILE] [--baseline DIR] [--no-llama] [--bursts "64 1024"] [--burst-rounds K]
#                            [--no-steady]
#   default model: the Qwen2.5-0.5B-shaped Q4_0 synth file in ~/.cache/tokroute/synth (written when missing).
#   --baseline DIR: also DIR/tokroute ("before"), alternating with the others, for a before/after table;
#   --no-llama: tokroute alone (quick iterations; the table's comparison needs llama-server).
#   --bursts "": no burst tables; --no-steady: no steady-state table.
set -euo pipefail
build=build threads=2 rounds=3 duration=20 sessions="1 4 16" model= baseline= llama=1 bursts="64 1024"
burst_rounds=2 steady=1
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
    --bursts) bursts=$2; shift 2 ;;
    --burst-rounds) burst_rounds=$2; shift 2 ;;
    --no-steady) steady=; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
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
ctx=512 # per session: a sequence starts over before it passes this (steady); a burst's holds its prompt and calls
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_before() { start_tokroute "$1" "$baseline/tokroute"; }

start_tokroute() { # N [BINARY]
  rm -f "$tmp/ready"
  "${2:-$tokroute}" serve -m "$model" --port 0 --ready-file "$tmp/ready" -t "$threads" -c "$ctx" --quiet \
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
workloads="${steady:+0} $bursts" # 0: steady state; else a burst's prompt tokens
for r in $(seq "$rounds"); do
  for w in $workloads; do
    [ "$w" = 0 ] || [ "$r" -le "$burst_rounds" ] || continue
    ctx=512
    [ "$w" = 0 ] || ctx=$(( (w + 16 * 8 + 1 + 255) / 256 * 256 ))
    for n in $sessions; do
      order="tokroute${baseline:+ before}${llama:+ llama}"
      [ $((r % 2)) = 1 ] || order=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')
      for kind in $order; do
        "start_$kind" "$n"
        client=$kind
        [ "$kind" = before ] && client=tokroute
        if [ "$w" = 0 ]; then
          line=$(python3 "$here/serve_fair_client.py" --kind $client --port "$port" --sessions "$n" \
            --duration "$duration" --max-len $ctx --tag "r$r")
        else
          line=$(python3 "$here/serve_fair_client.py" --kind $client --port "$port" --sessions "$n" \
            --burst "$w" --calls 16 --bursts $(( w >= 512 ? 1 : 3 )) --tag "r$r")
        fi
        [ "$kind" = before ] && line=${line/\"kind\": \"tokroute\"/\"kind\": \"before\"}
        stop
        echo "round $r/$rounds: $line" >&2
        echo "$line" >>"$results"
      done
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    r.setdefault("burst", 0)
def stat(kind, n, key, w):
    v = [r[key] for r in rows if r["kind"] == kind and r["sessions"] == n and r["burst"] == w]
    return (statistics.median(v), min(v), max(v)) if v else (float("nan"),) * 3  # nan: runs missing
def cell(m, lo, hi, f):
    return f"{m:{f}} ({lo:{f}}–{hi:{f}})"
names = {"tokroute": "tokroute", "before": "tokroute before", "llama": "llama-server"}
kinds = [k for k in names if any(r["kind"] == k for r in rows)]
def ratio(a, b, n, w):  # median (min–max) of the rounds' paired ratios
    v = sorted(x["calls_per_s"] / y["calls_per_s"] for x, y in
               zip([r for r in rows if r["kind"] == a and r["sessions"] == n and r["burst"] == w],
                   [r for r in rows if r["kind"] == b and r["sessions"] == n and r["burst"] == w]))
    return f"{cell(statistics.median(v), v[0], v[-1], '.2f')}x" if v else "–"
pairs = [(a, "llama") for a in ("tokroute", "before") if a in kinds and "llama" in kinds]
for w in sorted({r["burst"] for r in rows}):
    print()
    print("steady state:" if w == 0 else f"bursts of {w}-token prompts (each session then 16 calls of +8 tokens):")
    extra = [] if w == 0 else ["prompt_p99_ms", "call_p99_ms"]
    print("| sessions | " + " | ".join(f"{names[k]} calls/s" for k in kinds) + "".join(
        f" | {names[a]} / llama-server" for a, _ in pairs) + " | " + " | ".join(
        f"{names[k]} p50 / p99 ms" for k in kinds) + "".join(
        f" | {names[k]} {e.split('_')[0]} p99 ms" for e in extra for k in kinds) + " | errors |")
    print("|---|" + "---|" * (2 * len(kinds) + len(pairs) + len(extra) * len(kinds) + 1))
    for n in sorted({r["sessions"] for r in rows if r["burst"] == w}):
        calls = [cell(*stat(k, n, "calls_per_s", w), '.2f') for k in kinds]
        lat = [f"{stat(k, n, 'p50_ms', w)[0]:.0f} / {cell(*stat(k, n, 'p99_ms', w), '.0f')}" for k in kinds]
        more = [cell(*stat(k, n, e, w), '.0f') for e in extra for k in kinds]
        err = sum(r["errors"] for r in rows if r["sessions"] == n and r["burst"] == w)
        print(f"| {n} | " + " | ".join(calls) + "".join(f" | {ratio(a, b, n, w)}" for a, b in pairs) + " | "
              + " | ".join(lat) + "".join(f" | {m}" for m in more) + f" | {err} |")
failed = [r for r in rows if r["errors"]]
if failed:  # what went wrong, once per run with errors (a burst session stops at its first failed call)
    print()
    for r in failed:
        what = f"{r['burst']}-token bursts" if r["burst"] else "steady"
        print(f"errors: {names[r['kind']]}, {r['sessions']} sessions, {what}: {r['errors']}, first: "
              f"{r.get('first_error') or '?'}")
EOF
