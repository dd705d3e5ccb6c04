#!/usr/bin/env bash
# eval.sh — reproduces issue 8's report end to end on the demo pair (../shared/models) and TinyStories: collect
# teacher-forced data on stories 0-799 (plus 8000 stories sampled from the LLM), train a router, calibrate it, then
# evaluate every policy on stories 800-999 at 5/10/20% routed, and print the share of the SLM→LLM gap each closes with the time each step took (about 10-20 minutes on 2 cores). Outputs go
# to OUT (default out/eval): the router, the collected data, eval.json, CSV tables and the SVG plots.
# Usage: scripts/eval.sh [path/to/tokroute] [path/to/shared]   (`make eval` runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
cli=${1:-build/tokroute}
shared=${2:-../shared}
out=${OUT:-out/eval}
threads=${THREADS:-1}
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
data=$shared/data/tinystories/tinystories_val.txt
mkdir -p "$out"
times=$out/times.txt
: >"$times"

step() { # step NAME command...: runs it, records its wall time
  local name=$1 t0 t1
  shift
  t0=$(date +%s%N)
  "$@"
  t1=$(date +%s%N)
  awk -v n="$name" -v d="$((t1 - t0))" 'BEGIN { printf "%s %.1f\n", n, d / 1e9 }' >>"$times"
}

# The recipe (README "Router training"), which is train-router's default: the 800 training stories plus 8000 stories
# sampled from the LLM (never the evaluation stories), 32,000 more sampled stories counted into the ngram feature's
# table only (--ngram-data: no training rows), soft "expected" labels, every feature including the SLM's embedding
# of its proposed token, two hidden layers 256,128. Collect resumes, so a re-run only trains and evaluates.
threads_train=${TRAIN_THREADS:-$(nproc 2>/dev/null || echo 2)}
step collect "$cli" collect --slm "$slm" --llm "$llm" --data "$data" --format text --range 0:800 \
  --out "$out/collect" -t 1
step collect-sampled "$cli" collect --slm "$slm" --llm "$llm" --format llm-sample --range 0:8000 \
  --out "$out/sampled" -t 1
step collect-table "$cli" collect --slm "$slm" --llm "$llm" --format llm-sample --range 8000:40000 \
  --out "$out/table" -t 1
step train-router "$cli" train-router --data "$out/collect,$out/sampled" --ngram-data "$out/table" \
  --out "$out/router.gguf" \
  --seed 1 -t "$threads_train"   # the defaults are the recipe; the SLM's token table comes from the path collect recorded
step calibrate "$cli" calibrate --router "$out/router.gguf" --slm "$slm" --data "$out/collect" --target-routed 0.1 \
  | tee "$out/calibrate.txt"
router_args=(--router "$out/router.gguf")

step eval "$cli" eval --slm "$slm" --llm "$llm" --data "$data" --format text --range 800:1000 \
  "${router_args[@]}" --routed 0.05,0.1,0.2 --out "$out" --threads "$threads" --json >"$out/summary.json"

python3 - "$out/summary.json" "$times" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
slm, llm = doc["slm_accuracy"], doc["llm_accuracy"]
print(f"stories 800-999, {doc['n_positions']} predicted tokens: SLM accuracy {slm:.4f}, LLM accuracy {llm:.4f}")
print()
targets = [p["target_routed"] for p in next(iter(doc["policies"].values()))]
print("share of the SLM->LLM gap closed (token accuracy)")
print("| policy  | " + " | ".join(f"{t * 100:g}% routed".ljust(18) for t in targets) + " |")
print("|---------|" + "|".join("-" * 20 for _ in targets) + "|")
rows = list(doc["policies"].items()) + [("oracle", doc["oracle"])]
for name, pts in rows:
    cells = [f"{p['gap_closed'] * 100:5.1f}% ({p['accuracy']:.4f})" for p in pts]
    print(f"| {name:7s} | " + " | ".join(f"{c:18s}" for c in cells) + " |")
print()
print("time per step: " + ", ".join(f"{n} {s} s" for n, s in (l.split() for l in open(sys.argv[2]))))
PY
echo "plots: $out/accuracy_vs_routed.svg $out/routed_vs_tau.svg; tables: $out/tokens.csv $out/latency.csv"
