#!/usr/bin/env bash
# train_chain.sh — the router workflow a user runs on their own pair, end to end on a small slice with the demo
# pair: collect teacher-forced data (stories plus LLM-sampled text), train a router on it, calibrate τ for a routed
# share, then evaluate the router file beside the training-free policies. Checks the files each step writes, that
# calibration hits its target on the collected data, that the router file loads in `tokroute eval` and
# `tokroute generate`, and that a second collect into the same folder resumes instead of redoing work.
set -euo pipefail
cli=$1
shared=$2
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
data=$shared/data/tinystories/tinystories_val.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. collect: 12 stories and 8 LLM samples, JSON summary on stdout.
"$cli" collect --slm "$slm" --llm "$llm" --data "$data" --format text --range 0:12 --out "$tmp/stories" -t 1 \
  --json >"$tmp/collect.json" 2>"$tmp/err" || { cat "$tmp/err"; fail "collect"; }
"$cli" collect --slm "$slm" --llm "$llm" --format llm-sample --range 0:8 --out "$tmp/sampled" -t 1 \
  --json >"$tmp/sampled.json" 2>"$tmp/err" || { cat "$tmp/err"; fail "collect llm-sample"; }
for d in stories sampled; do
  [ -s "$tmp/$d/positions.bin" ] && [ -s "$tmp/$d/index.bin" ] || fail "collect wrote no data in $d"
done
cp "$tmp/stories/positions.bin" "$tmp/positions.before"
"$cli" collect --slm "$slm" --llm "$llm" --data "$data" --format text --range 0:12 --out "$tmp/stories" -t 1 \
  --json >"$tmp/resume.json" 2>"$tmp/err" || { cat "$tmp/err"; fail "collect again"; }
cmp -s "$tmp/positions.before" "$tmp/stories/positions.bin" || fail "a finished collect was redone or changed"
python3 - "$tmp/collect.json" "$tmp/resume.json" <<'PY' || fail "collect summaries"
import json, sys
first, again = (json.load(open(p)) for p in sys.argv[1:3])
assert first["positions"] > 1000, first
assert again["positions"] == first["positions"], (first, again)
PY

# 2. train-router on both folders (a few epochs), JSON result on stdout.
"$cli" train-router --data "$tmp/stories,$tmp/sampled" --out "$tmp/router.gguf" --epochs 3 --hidden 32 --seed 7 -t 1 \
  --json >"$tmp/train.json" 2>"$tmp/err" || { cat "$tmp/err"; fail "train-router"; }
[ -s "$tmp/router.gguf" ] || fail "no router file"
"$cli" inspect "$tmp/router.gguf" >"$tmp/inspect.txt" || fail "inspect the router file"
grep -q "tokroute-router" "$tmp/inspect.txt" || fail "the router file is not a tokroute router"

# 3. calibrate: the τ that routes 10% of the collected positions.
"$cli" calibrate --router "$tmp/router.gguf" --data "$tmp/stories" --target-routed 0.1 --json >"$tmp/cal.json" \
  2>"$tmp/err" || { cat "$tmp/err"; fail "calibrate"; }
tau=$(python3 - "$tmp/cal.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["target_routed"] == 0.1 and abs(c["routed"] - 0.1) < 0.01, c
assert 0 <= c["tau"] <= 1, c
print(c["tau"])
PY
) || fail "calibration missed its target"

# 4. eval with the router beside the policies on unseen stories.
"$cli" eval --slm "$slm" --llm "$llm" --data "$data" --format text --range 800:806 --router "$tmp/router.gguf" \
  --routed 0.05,0.1,0.2 --max-new 8 --out "$tmp/eval" --json >"$tmp/eval.json" 2>"$tmp/err" \
  || { cat "$tmp/err"; fail "eval with the router"; }
for f in eval.json tokens.csv sweep.csv latency.csv accuracy_vs_routed.svg routed_vs_tau.svg; do
  [ -s "$tmp/eval/$f" ] || fail "eval wrote no $f"
done
python3 - "$tmp/eval.json" <<'PY' || fail "eval JSON"
import json, sys
doc = json.load(open(sys.argv[1]))
assert {"router", "maxprob", "margin", "entropy", "random"} <= set(doc["policies"]), doc["policies"].keys()
for p in doc["policies"]["router"]:
    assert abs(p["routed"] - p["target_routed"]) < 0.02 and 0 < p["accuracy"] < 1, p
PY

# 5. the router drives a routed generation at the calibrated τ.
"$cli" generate --slm "$slm" --llm "$llm" --router "$tmp/router.gguf" --threshold "$tau" -p "Once upon a time" -n 24 \
  --summary-json >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; fail "generate with the router"; }
python3 - "$tmp/err" <<'PY' || fail "generation summary"
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
assert s["n_tokens"] == 24 and 0 <= s["n_routed"] <= 24, s
PY
echo "ok   collect → train-router → calibrate → eval → generate"
