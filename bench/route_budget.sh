#!/usr/bin/env bash
# route_budget.sh — how well the routed share keeps its budget in free-running generation, on the demo pair.
# Collects teacher-forced data (stories 0-199) and round-2 data, trains a router, calibrates τ per policy and
# target on each, then over N prompts (the first sentence of stories 800..) × 200 greedy tokens reports:
#   1. the share generation routes at the teacher-forced τ and at the round-2 τ (no controller);
#   2. the controllers of route_budget.py compared offline on the traces of (1) against the oracle;
#   3. the share with --target-routed (src/route/budget.c) started at the teacher-forced τ, greedy and sampled at
#      T 0.8, and started at the CLI's default τ (the router file's; 0.5 for the policies), greedy.
# usage: bench/route_budget.sh TOKROUTE_BIN SHARED_DIR [N_PROMPTS (30)] [WORK_DIR]
set -euo pipefail
cli=$1
shared=$2
n_prompts=${3:-30}
work=${4:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
stories=$shared/data/tinystories/tinystories_val.txt
mkdir -p "$work"

if [ ! -s "$work/r.gguf" ]; then
  "$cli" collect --slm "$slm" --llm "$llm" --data "$stories" --format text --range 0:200 --max-tokens 128 \
    --out "$work/tf" -t 1 --json >/dev/null
  "$cli" train-router --data "$work/tf" --out "$work/r.gguf" --epochs 6 -t 1 --json >/dev/null
  "$cli" collect --slm "$slm" --llm "$llm" --data "$stories" --format text --range 0:200 --max-tokens 128 \
    --round 2 --router "$work/r.gguf" --out "$work/r2" -t 1 --json >/dev/null
fi

python3 - "$stories" "$n_prompts" >"$work/prompts.txt" <<'PY'
import sys
text = open(sys.argv[1]).read().split("<|endoftext|>")
for story in text[800:800 + int(sys.argv[2])]:
    s = story.strip().replace("\n", " ")
    print(s[:s.find(". ") + 1] if ". " in s[:200] else s[:80])
PY

# share.py FILES...: mean, min, max of the routed share over summary-JSON lines, and the worst running share
share() { python3 -c '
import json, sys
s = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.startswith("{\"mode")]
r = [x["n_routed"] / x["n_tokens"] for x in s]
print("%5.1f%% (%4.1f..%4.1f)" % (100 * sum(r) / len(r), 100 * min(r), 100 * max(r)), end="")
' "$@"; }

run() { # run NAME ARGS...: generate for every prompt; traces in $work/NAME.i.jsonl, summaries in $work/NAME.sum
  local name=$1; shift
  : >"$work/$name.sum"
  local i=0
  while IFS= read -r prompt; do
    "$cli" generate --slm "$slm" --llm "$llm" -p "$prompt" -n 200 --ignore-eos -t 1 --no-color --summary-json \
      --trace "$work/$name.$i.jsonl" "$@" >/dev/null 2>>"$work/$name.sum"
    i=$((i + 1))
  done <"$work/prompts.txt"
}

router_args() { if [ "$1" = router ]; then echo "--router $work/r.gguf"; else echo "--policy $1"; fi; }
router_name() { if [ "$1" = router ]; then echo "$work/r.gguf"; else echo "$1"; fi; }

echo "policy   target  tau(tf)  share@tf            tau(r2)  share@r2            ctl greedy           ctl sampled          ctl default tau"
for pol in maxprob margin entropy router; do
  for p in 0.05 0.1 0.2; do
    tf=$("$cli" calibrate --router "$(router_name $pol)" --data "$work/tf" --target-routed $p 2>/dev/null)
    r2=$("$cli" calibrate --router "$(router_name $pol)" --data "$work/r2" --target-routed $p 2>/dev/null)
    # shellcheck disable=SC2046
    run "$pol-$p-tf" $(router_args $pol) --threshold "$tf"
    # shellcheck disable=SC2046
    run "$pol-$p-r2" $(router_args $pol) --threshold "$r2"
    # shellcheck disable=SC2046
    run "$pol-$p-ctl" $(router_args $pol) --target-routed $p --threshold "$tf"
    # shellcheck disable=SC2046
    run "$pol-$p-ctls" $(router_args $pol) --target-routed $p --threshold "$tf" --temp 0.8 --seed 7
    # shellcheck disable=SC2046
    run "$pol-$p-ctld" $(router_args $pol) --target-routed $p
    printf "%-8s %5.2f  %7.4f  %s  %7.4f  %s  %s  %s  %s\n" $pol $p "$tf" "$(share "$work/$pol-$p-tf.sum")" "$r2" \
      "$(share "$work/$pol-$p-r2.sum")" "$(share "$work/$pol-$p-ctl.sum")" "$(share "$work/$pol-$p-ctls.sum")" \
      "$(share "$work/$pol-$p-ctld.sum")"
    python3 "$here/route_budget.py" "$tf" $p "$work/$pol-$p-tf".*.jsonl >"$work/$pol-$p-sim.txt"
  done
done
echo
for f in "$work"/*-sim.txt; do echo "== $(basename "$f" -sim.txt)"; cat "$f"; done
