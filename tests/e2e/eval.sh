#!/usr/bin/env bash
# eval.sh — `tokroute eval` as a user runs it on a few TinyStories stories with the demo pair: --json prints exactly
# the documented document on stdout (nothing else), --out writes the JSON, CSV and SVG files with consistent
# contents, the table mode prints the gap closed per policy, a question format runs task-level generation, and bad
# options fail with exit 2 and a clear message.
set -euo pipefail
cli=$1
shared=$2
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
data=$shared/data/tinystories/tinystories_val.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

grep -q -- "--routed" <<<"$("$cli" eval --help)" || fail "--help lacks --routed"

# JSON on stdout, files in --out.
"$cli" eval --slm "$slm" --llm "$llm" --data "$data" --format text --range 800:806 --routed 0.05,0.1,0.2 \
  --max-new 16 --out "$tmp/out" --json >"$tmp/stdout.json" 2>"$tmp/err.txt" || { cat "$tmp/err.txt"; fail "eval failed"; }
for f in eval.json tokens.csv sweep.csv generate.csv latency.csv accuracy_vs_routed.svg routed_vs_tau.svg; do
  [ -s "$tmp/out/$f" ] || fail "missing $f"
done
python3 - "$tmp/stdout.json" "$tmp/out" <<'PY'
import csv, json, math, sys, xml.etree.ElementTree as ET
doc = json.load(open(sys.argv[1]))            # stdout is exactly one JSON document
out = sys.argv[2]
slm, llm = doc["slm_accuracy"], doc["llm_accuracy"]
assert 0 < slm < llm < 1, (slm, llm)
pol = doc["policies"]
assert set(pol) == {"maxprob", "margin", "entropy", "random"}, pol.keys()
for name, pts in pol.items():
    assert [p["target_routed"] for p in pts] == [0.05, 0.1, 0.2], pts
    for p in pts:
        assert {"target_routed", "tau", "routed", "accuracy"} <= set(p), p
        assert abs(p["routed"] - p["target_routed"]) < 0.01, p
        assert 0 <= p["tau"] <= 1.0001 and 0 < p["accuracy"] < 1, p
        assert abs(p["gap_closed"] - (p["accuracy"] - slm) / (llm - slm)) < 1e-9, p
    accs = [p["accuracy"] for p in pts]
    assert accs == sorted(accs) or name == "random", (name, accs)   # more routing, more accuracy
oracle = doc["oracle"]
assert len(oracle) == 3 and all(o["accuracy"] >= max(p[i]["accuracy"] for p in pol.values()) - 1e-9
                                for i, o in enumerate(oracle)), oracle
assert doc["n_examples"] == 6 and doc["range"] == [800, 806], doc["range"]
runs = doc["generation"]["runs"]
assert doc["generation"]["kind"] == "free-running" and len(runs) == 2 + 3 * 3 * 2, len(runs)
# each policy at each target twice: at the teacher-forced tau, then with tau following the routed share, which holds
# it within 2.5 tokens of the target in each 16-token generation
for plain, ctl in zip(runs[2::2], runs[3::2]):
    assert not plain["controlled"] and ctl["controlled"] and plain["policy"] == ctl["policy"], (plain, ctl)
    assert plain["target_routed"] == ctl["target_routed"] and plain["tau"] == ctl["tau"], (plain, ctl)
    assert abs(ctl["routed"] - ctl["target_routed"]) <= 2.5 / 16 + 1e-9, ctl
assert runs[0]["mode"] == "slm" and runs[0]["routed"] == 0 and runs[1]["mode"] == "llm" and runs[1]["routed"] == 1
for r in runs:
    assert r["examples"] == 6 and r["tokens"] == 6 * 16 and r["perplexity"] > 1, r
    lat = r["latency"]
    assert all(lat[k] >= 0 for k in ("routed_tokens", "slm_ms", "ttft_ms", "tbt_ms", "llm_ms", "overall_ms")), lat
full = json.load(open(f"{out}/eval.json"))
assert full["policies"] == doc["policies"] and "sweep" in full
sw = full["sweep"]["maxprob"]["tau_grid"]
assert len(sw["tau"]) == 101 and sw["routed"][0] == 0 and sw["routed"][-1] >= 0.99, sw["routed"][-1]
assert all(a <= b for a, b in zip(sw["routed"], sw["routed"][1:]))   # routed share grows with tau
rows = list(csv.DictReader(open(f"{out}/tokens.csv")))
assert len(rows) == 2 + 5 * 3, len(rows)
for r in rows:
    if r["policy"] in pol:
        p = pol[r["policy"]][[0.05, 0.1, 0.2].index(float(r["target_routed"]))]
        assert abs(float(r["accuracy"]) - p["accuracy"]) < 1e-5 and abs(float(r["tau"]) - p["tau"]) < 1e-5, r
lat = list(csv.DictReader(open(f"{out}/latency.csv")))
assert len(lat) == 20 and set(lat[0]) >= {"routed_tokens", "slm_ms", "ttft_ms", "tbt_ms", "llm_comm_ms", "overall_ms"}
for svg in ("accuracy_vs_routed.svg", "routed_vs_tau.svg"):
    root = ET.parse(f"{out}/{svg}").getroot()             # well-formed XML
    assert root.tag.endswith("svg")
    texts = [t.text or "" for t in root.iter() if t.tag.endswith("text")]
    lines = [e for e in root.iter() if e.tag.endswith("polyline")]
    assert "maxprob" in texts and "random" in texts and len(lines) >= 4, (svg, texts)
    for e in lines:
        for pt in e.get("points").split():
            x, y = map(float, pt.split(","))
            assert math.isfinite(x) and math.isfinite(y)
PY
grep -q "^tokroute eval: [0-9.]* s$" "$tmp/err.txt" || fail "no timing line on stderr"

# Table mode on stdout.
"$cli" eval --slm "$slm" --llm "$llm" --data "$data" --format text --range 3 --no-generate >"$tmp/table.txt" 2>/dev/null
grep -q "^SLM accuracy" "$tmp/table.txt" || fail "no accuracy line"
grep -q "^oracle" "$tmp/table.txt" && grep -q "^maxprob" "$tmp/table.txt" || fail "policies missing in the table"
grep -q "10% routed" "$tmp/table.txt" || fail "no target columns"

# A question format: task-level generation with answer checking.
"$cli" eval --slm "$slm" --llm "$llm" --data "$shared/data/commonsenseqa/dev_rand_split.jsonl" --format csqa \
  --range 0:2 --routed 0.1 --max-new 4 --json >"$tmp/csqa.json" 2>/dev/null || fail "csqa eval failed"
# The console table shows the answer accuracy too: the models alone, then per policy and target.
"$cli" eval --slm "$slm" --llm "$llm" --data "$shared/data/commonsenseqa/dev_rand_split.jsonl" --format csqa \
  --range 0:2 --routed 0.1 --max-new 4 >"$tmp/csqa.txt" 2>/dev/null || fail "csqa eval (table) failed"
grep -Eq "^answer accuracy in generation: SLM [0-9.]+   LLM [0-9.]+$" "$tmp/csqa.txt" &&
  grep -q "^answer accuracy in generation (at the teacher-forced tau" "$tmp/csqa.txt" &&
  grep -Eq "^maxprob +[0-9.]+ / [0-9.]+" "$tmp/csqa.txt" || fail "no answer accuracy on the console: $(cat "$tmp/csqa.txt")"
python3 - "$tmp/csqa.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
g = doc["generation"]
assert g["kind"] == "task" and len(g["runs"]) == 2 + 3 * 2, g
assert all(0 <= r["accuracy"] <= 1 and r["examples"] + r["skipped"] == 2 for r in g["runs"]), g["runs"]
PY

# Bad input: exit 2 for usage errors, 1 with a message for bad data.
set +e
"$cli" eval --slm "$slm" --llm "$llm" --data "$data" >/dev/null 2>"$tmp/e1"; rc1=$?
"$cli" eval --slm "$slm" --llm "$llm" --data "$data" --format text --routed 0.1,2 >/dev/null 2>"$tmp/e2"; rc2=$?
"$cli" eval --slm "$slm" --llm "$llm" --data "$data" --format text --range 9:3 >/dev/null 2>"$tmp/e3"; rc3=$?
"$cli" eval --slm "$slm" --llm "$llm" --data "$data" --format text --range 990:1005 >/dev/null 2>"$tmp/e4"; rc4=$?
printf '{"question": "q"}\n' >"$tmp/bad.jsonl"
"$cli" eval --slm "$slm" --llm "$llm" --data "$tmp/bad.jsonl" --format gsm8k >/dev/null 2>"$tmp/e5"; rc5=$?
set -e
[ $rc1 = 2 ] && grep -q "need --format" "$tmp/e1" || fail "missing --format: rc $rc1"
[ $rc2 = 2 ] && grep -q -- "--routed" "$tmp/e2" || fail "bad --routed: rc $rc2"
[ $rc3 = 2 ] && grep -q -- "--range" "$tmp/e3" || fail "bad --range: rc $rc3"
[ $rc4 = 1 ] && grep -q "1000 examples" "$tmp/e4" || fail "range past the end: rc $rc4 $(cat "$tmp/e4")"
[ $rc5 = 1 ] && grep -q "bad.jsonl:1: no \"answer\" string" "$tmp/e5" || fail "malformed line: rc $rc5 $(cat "$tmp/e5")"
echo "e2e eval: ok"
