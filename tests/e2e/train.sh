#!/usr/bin/env bash
# train.sh — router training as a user runs it on a small slice: collect (text and llm-sample, interrupted and
# resumed), train-router (--json, --eval-data), calibrate (--json, --gap), a round-2 collect with the trained
# router, the trained router evaluated by `tokroute eval` beside the training-free policies and used by `generate`,
# and clear errors for bad input. Well under a minute.
set -euo pipefail
cli=$1
shared=$2
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
stories=$shared/data/tinystories/tinystories_val.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

grep -q -- "--rollouts" <<<"$("$cli" collect --help)" || fail "collect --help"
grep -q -- "--labels" <<<"$("$cli" train-router --help)" || fail "train-router --help"
grep -q -- "--target-routed" <<<"$("$cli" calibrate --help)" || fail "calibrate --help"

# Collect stories 0-29 (training) and 30-39 (evaluation); the summary is JSON.
"$cli" collect --slm "$slm" --llm "$llm" --data "$stories" --format text --range 0:30 --max-tokens 96 \
  --rollouts 4 --out "$tmp/train" -t 1 --json >"$tmp/collect.json"
python3 - "$tmp/collect.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["examples"] == 30 and s["resumed"] == 0 and s["positions"] == 30 * 95, s
assert 0 < s["slm_correct"] < s["llm_correct"] < s["positions"], s
PY
[ -s "$tmp/train/positions.bin" ] && [ -s "$tmp/train/index.bin" ] || fail "collect files missing"
"$cli" collect --slm "$slm" --llm "$llm" --data "$stories" --format text --range 30:40 --max-tokens 96 \
  --out "$tmp/eval" -t 1 2>"$tmp/collect.err"
grep -q "collected 10 examples" "$tmp/collect.err" || fail "no collect summary"

# Resume: a second run over a longer range collects only the new examples.
"$cli" collect --slm "$slm" --llm "$llm" --format llm-sample --range 0:3 --max-tokens 64 --out "$tmp/sample" \
  -t 1 --json >/dev/null
"$cli" collect --slm "$slm" --llm "$llm" --format llm-sample --range 0:5 --max-tokens 64 --out "$tmp/sample" \
  -t 1 --json >"$tmp/resume.json"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['resumed']==3 and s['examples']==5, s" \
  "$tmp/resume.json"
# Other settings in the same folder are refused.
if "$cli" collect --slm "$slm" --llm "$llm" --format llm-sample --range 0:5 --max-tokens 64 --topk 8 \
  --out "$tmp/sample" -t 1 2>"$tmp/err.txt"; then fail "resume with other settings accepted"; fi
grep -q "cannot be resumed: the SLM's top-k: 16 there, 8 here" "$tmp/err.txt" ||
  fail "unclear resume error: $(cat "$tmp/err.txt")"

# Train on both folders, evaluate on the held-out one.
"$cli" train-router --data "$tmp/train,$tmp/sample" --out "$tmp/r.gguf" --hidden 2h,h --epochs 4 --labels rollout \
  --eval-data "$tmp/eval" -t 1 --json >"$tmp/train.json"
python3 - "$tmp/train.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert 1 <= s["best_epoch"] <= s["epochs"] <= 4 and s["n_train"] > 0 and s["n_val"] > 0, s
ev = s["eval"]
assert 0 < ev["slm_accuracy"] < ev["llm_accuracy"] < 1, ev
for name in ("router", "maxprob", "margin", "entropy", "oracle"):
    pts = ev["policies"][name]
    assert [p["target_routed"] for p in pts] == [0.05, 0.1, 0.2], pts
    for p in pts:
        assert abs(p["routed"] - p["target_routed"]) < 0.01 and 0 <= p["accuracy"] <= 1, p
PY
"$cli" inspect "$tmp/r.gguf" 2>/dev/null >"$tmp/inspect.txt"
grep -Eq "tokroute-router.features +\[str × 7\]" "$tmp/inspect.txt" || fail "router file does not record its features"
grep -Eq "tokroute-router.topk +8$" "$tmp/inspect.txt" || fail "router file does not record its top-k"
grep -Eq "tokroute-router.ngram.order +6$" "$tmp/inspect.txt" && grep -Eq "ngram.6.context" "$tmp/inspect.txt" ||
    fail "router file does not hold the ngram table (a default feature)"

# --ngram-data: folders counted into the ngram table only. The table counts the llm-sample folder's tokens too
# (more tokens and contexts than from the training folder alone) while the training rows stay the training
# folder's; without the ngram feature it is refused by name.
grep -q -- "--ngram-data" <<<"$("$cli" train-router --help)" || fail "train-router --help lacks --ngram-data"
"$cli" train-router --data "$tmp/train" --out "$tmp/n0.gguf" --hidden 8 --epochs 1 -t 1 --json >"$tmp/n0.json"
"$cli" train-router --data "$tmp/train" --ngram-data "$tmp/sample" --out "$tmp/n1.gguf" --hidden 8 --epochs 1 -t 1 \
  --json >"$tmp/n1.json"
python3 - "$tmp/n0.json" "$tmp/n1.json" <<'PY' || fail "--ngram-data did not add its counts to the table"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["n_train"] == b["n_train"] and a["n_val"] == b["n_val"], (a, b)
assert a["ngram"]["tokens"] == 30 * 95 and b["ngram"]["tokens"] > a["ngram"]["tokens"], (a, b)
assert b["ngram"]["contexts"] > a["ngram"]["contexts"] and b["ngram"]["bytes"] > a["ngram"]["bytes"], (a, b)
PY
set +e
"$cli" train-router --data "$tmp/train" --ngram-data "$tmp/sample" --features maxprob --out "$tmp/x.gguf" \
  2>"$tmp/err.txt"; [ $? -eq 1 ] || fail "--ngram-data without the ngram feature accepted"
set -e
grep -q "ngram_data is counted into the ngram feature's table" "$tmp/err.txt" ||
  fail "unclear --ngram-data refusal: $(cat "$tmp/err.txt")"
# scripts/router_bound.py: the oracle and the LLM-expected-gain bound on the same data (the bound never beats the
# oracle, and both beat routing nothing).
python3 "$(dirname "$0")/../../scripts/router_bound.py" "$tmp/eval" >"$tmp/bound.txt" || fail "router_bound.py"
python3 - "$tmp/bound.txt" <<'PY' || fail "router_bound.py output: $(cat "$tmp/bound.txt")"
import re, sys
rows = {l[:18].strip(): [float(x) for x in re.findall(r": +(-?[0-9.]+)%", l[18:])] for l in open(sys.argv[1]).read().splitlines()[1:]}
o, b = rows["oracle"], rows["LLM expected gain"]
assert len(o) == len(b) == 3 and all(0 < y <= x for x, y in zip(o, b)), rows
PY
# scripts/induction_gain.py: every position falls in one induction case; the cases' shares add up to the whole.
python3 "$(dirname "$0")/../../scripts/induction_gain.py" "$tmp/eval" >"$tmp/induction.txt" || fail "induction_gain.py"
python3 - "$tmp/induction.txt" <<'PY' || fail "induction_gain.py output: $(cat "$tmp/induction.txt")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
n, gain = map(int, re.match(r"(\d+) positions, realized gain (-?\d+)$", lines[0]).groups())
rows = [re.match(r"(no earlier x|match [123]\+?, c (?:==|!=) top-1) +([0-9.]+)% of positions +(-?[0-9.]+)% of the gain", l)
        for l in lines[1:]]
assert n > 0 and rows and all(rows), lines
assert abs(sum(float(r.group(2)) for r in rows) - 100) < 0.5, lines
assert gain == 0 or abs(sum(float(r.group(3)) for r in rows) - 100) < 0.5, lines
PY
# train-router's report carries the same bound beside every policy, with each policy's share of it.
python3 - "$tmp/train.json" "$tmp/bound.txt" <<'PY' || fail "the bound in train-router's report differs from router_bound.py's"
import json, re, sys
ev = json.load(open(sys.argv[1]))["eval"]
line = [l for l in open(sys.argv[2]) if l.startswith("LLM expected gain")][0]
script = [float(x) / 100 for x in re.findall(r": +(-?[0-9.]+)%", line[18:])]
for name, pts in ev["policies"].items():
    for p, b in zip(pts, script):
        assert abs(p["bound_gap_closed"] - b) < 0.0006, (name, p, b)
        if p["share_of_bound"] is not None:
            assert abs(p["share_of_bound"] - p["gap_closed"] / p["bound_gap_closed"]) < 1e-5, (name, p)
PY

# Calibrate: tau routes the asked share of the evaluation positions.
"$cli" calibrate --router "$tmp/r.gguf" --data "$tmp/eval" --target-routed 0.15 --json >"$tmp/cal.json"
python3 - "$tmp/cal.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert abs(s["routed"] - 0.15) < 0.002 and 0 <= s["tau"] <= 1 and s["positions"] == 950, s
PY
tau=$("$cli" calibrate --router maxprob --data "$tmp/eval" --target-routed 0.1 2>/dev/null)
python3 -c "import sys; t=float(sys.argv[1]); assert 0 < t < 1, t" "$tau"
"$cli" calibrate --router "$tmp/r.gguf" --data "$tmp/eval" --target-routed 0.1 --gap 2>"$tmp/gap.txt" >/dev/null
grep -q "^oracle" "$tmp/gap.txt" || fail "calibrate --gap has no oracle row"
grep -q "^bound" "$tmp/gap.txt" || fail "calibrate --gap has no bound row"

# Question answering: only the answer's positions (prompt + " " + target, templates of the dataset module).
"$cli" collect --slm "$slm" --llm "$llm" --data "$shared/data/arc_challenge/arc_challenge.jsonl" --format arc \
  --range 0:4 --out "$tmp/arc" -t 1 --json >"$tmp/arc.json"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['examples']==4 and 4 <= s['positions'] < 60, s" \
  "$tmp/arc.json"

# Round 2: the prefix generated with the trained router in the loop.
"$cli" collect --slm "$slm" --llm "$llm" --data "$stories" --format text --range 0:5 --max-tokens 64 \
  --round 2 --router "$tmp/r.gguf" --prompt-tokens 8 --out "$tmp/round2" -t 1 --json >"$tmp/r2.json"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['examples']==5 and s['llm_correct']==s['positions']>0, s" \
  "$tmp/r2.json"

# The trained router in `tokroute eval`, beside the training-free policies, on unseen stories.
"$cli" eval --slm "$slm" --llm "$llm" --data "$stories" --format text --range 800:806 --router "$tmp/r.gguf" \
  --routed 0.05,0.1,0.2 --max-new 8 --out "$tmp/evalout" --json >"$tmp/eval.json" 2>"$tmp/err.txt" \
  || fail "eval with the trained router: $(cat "$tmp/err.txt")"
[ -s "$tmp/evalout/accuracy_vs_routed.svg" ] && [ -s "$tmp/evalout/latency.csv" ] || fail "eval wrote no plot/latency table"
python3 - "$tmp/eval.json" <<'PY' || fail "eval JSON with the router"
import json, sys
doc = json.load(open(sys.argv[1]))
assert {"router", "maxprob", "margin", "entropy", "random"} <= set(doc["policies"]), doc["policies"].keys()
for p in doc["policies"]["router"]:
    assert abs(p["routed"] - p["target_routed"]) < 0.02 and 0 < p["accuracy"] < 1, p
PY

# The trained router drives a routed generation.
"$cli" generate --slm "$slm" --llm "$llm" --router "$tmp/r.gguf" -p "Once upon a time" -n 16 >/dev/null 2>"$tmp/gen.txt" \
  || fail "generate with the trained router: $(cat "$tmp/gen.txt")"

# Bad input: clear messages, exit 2 for usage, 1 for data errors.
set +e
"$cli" collect --slm "$slm" --llm "$llm" --format text --out "$tmp/x" 2>"$tmp/err.txt"; [ $? -eq 2 ] || fail "missing --data"
"$cli" collect --slm "$slm" --llm "$llm" --data "$stories" --format poems --out "$tmp/x" 2>/dev/null; [ $? -eq 2 ] || fail "bad format"
"$cli" train-router --data "$tmp/train" --out "$tmp/x.gguf" --labels maybe 2>/dev/null; [ $? -eq 2 ] || fail "bad labels"
"$cli" train-router --data "$tmp/nothing" --out "$tmp/x.gguf" 2>"$tmp/err.txt"; [ $? -eq 1 ] || fail "missing data"
grep -q "cannot open" "$tmp/err.txt" || fail "unclear missing-data error"
head -c 1000 "$tmp/train/positions.bin" >"$tmp/bad.bin"; mkdir -p "$tmp/bad"; mv "$tmp/bad.bin" "$tmp/bad/positions.bin"
cp "$tmp/train/index.bin" "$tmp/bad/index.bin"
"$cli" calibrate --router maxprob --data "$tmp/bad" --target-routed 0.1 2>"$tmp/err.txt"; [ $? -eq 1 ] || fail "truncated data"
grep -q "runs past the end" "$tmp/err.txt" || fail "unclear truncated-data error: $(cat "$tmp/err.txt")"
set -e
echo "train.sh: ok"
