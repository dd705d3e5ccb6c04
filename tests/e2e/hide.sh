#!/usr/bin/env bash
# hide.sh — hiding the round trip (speculation + lookahead, the default for a remote LLM) against a real `tokroute
# serve` on 127.0.0.1, bounded in time: the token ids equal --sync's for several prompts, tau values and simulated
# RTTs; the summary's accounting adds up (every routed token is a call or a lookahead hit, bytes counted, fewer
# blocking round trips than --sync); the embedded backend with a delay does the same; the server killed while the
# loop speculates → the run ends as the failure policy says (fallback: finishes on the SLM with the gap marked, the
# tokens before it the LLM's; error: exits with the error, showing only confirmed tokens), never hanging.
# usage: hide.sh CLI SHARED
set -euo pipefail
cli=$1
shared=$2
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
source "$(dirname "$0")/../support/e2e.sh" # tmp, pids, fail, free_port, start_serve, crash_pid, stop_pid
gen() { timeout 120 "$cli" generate --slm "$slm" -n 48 --ids "$@"; }

port=$(free_port)
start_serve "$port"

# 1. Identity: default (speculation + lookahead) == --sync, on the server and on the embedded LLM with a delay.
n=0
for prompt in "Once upon a time" "Tom and his dog went to the park." "The little bird"; do
  for tau in 0.3 0.6 0.9; do
    ref=$(gen --server "$url" -p "$prompt" --threshold "$tau" --sync --no-summary 2>/dev/null)
    for rtt in 0 5 20; do
      got=$(gen --server "$url" -p "$prompt" --threshold "$tau" --simulate-rtt "$rtt" --summary-json 2>"$tmp/sum")
      [ "$got" == "$ref" ] || fail "--server rtt $rtt tau $tau '$prompt': $got != --sync $ref"
      python3 - "$tmp/sum" <<'PY' || fail "accounting: $(cat "$tmp/sum")"
import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert s["speculate_depth"] == 8 and s["lookahead"] == 8 and s["draft"] == 96, s
assert s["draft_hits"] <= s["lookahead_hits"], s
# drafts go only with calls; how many is adaptive (a share of the observed round trip, scaled by what drafts earn),
# so a loaded machine's slow SLM may draft none: the draft check below uses --draft-fixed
assert s["draft_tokens_verified"] <= s["draft_tokens_sent"] and (s["draft_tokens_sent"] == 0 or s["llm_calls"] > 0), s
assert s["llm_calls"] + s["lookahead_hits"] == s["n_routed"], s
assert s["spec_agree"] + s["spec_disagree"] == s["llm_calls"], s
assert s["llm_blocking"] <= s["llm_calls"] and s["n_fallback"] == 0, s
assert (s["llm_bytes_sent"] > 0 and s["llm_bytes_received"] > 0) == (s["llm_calls"] > 0), s
PY
      n=$((n + 1))
    done
    got=$(gen --llm "$llm" -p "$prompt" --threshold "$tau" --simulate-rtt 5 --no-summary 2>/dev/null)
    [ "$got" == "$ref" ] || fail "embedded with --simulate-rtt tau $tau '$prompt': $got != --sync $ref"
    got=$(gen --llm "$llm" -p "$prompt" --threshold "$tau" --speculate-depth 3 --lookahead 1 --no-summary 2>/dev/null)
    [ "$got" == "$ref" ] || fail "embedded depth 3 lookahead 1 tau $tau '$prompt': $got != --sync $ref"
    for d in "--draft 8 --draft-width 1" "--draft 256 --draft-width 8 --draft-span 64 --lookahead 0 --draft-fixed"; do
      # shellcheck disable=SC2086
      got=$(gen --server "$url" -p "$prompt" --threshold "$tau" --simulate-rtt 2 $d --no-summary 2>/dev/null)
      [ "$got" == "$ref" ] || fail "--server $d tau $tau '$prompt': $got != --sync $ref"
    done
    n=$((n + 4))
  done
done
# Sampled (the SLM's and the server's draws seeded by position; no lookahead is asked for a sampled LLM, drafts are
# verified with the same draws).
for seed in 1 2 3; do
  ref=$(gen --server "$url" -p "Once upon a time" --threshold 0.6 --temp 0.9 --seed "$seed" --sync --no-summary 2>/dev/null)
  got=$(gen --server "$url" -p "Once upon a time" --threshold 0.6 --temp 0.9 --seed "$seed" --simulate-rtt 5 \
    --summary-json 2>"$tmp/sum")
  [ "$got" == "$ref" ] || fail "sampled seed $seed: $got != --sync $ref"
  python3 - "$tmp/sum" <<'PY' || fail "lookahead used with a sampled LLM: $(cat "$tmp/sum")"
import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert s["lookahead_hits"] == s["draft_hits"], s  # drafts are verified by (seed, position) draws; lookahead is greedy
PY
  n=$((n + 1))
done
echo "identical to --sync: $n runs"

# 2. Fewer blocking round trips than --sync, and the server is not re-prefilled: the LLM evaluates at most the
# sequence plus, per call, its 8 lookahead tokens, the draft tokens it verified and one re-evaluated position (a
# call whose sequence the server already holds from a lookahead re-evaluates its last token for the logits); some
# routed tokens are answered by a draft verification. The --lookahead 0 run shows the drafts alone answering routed
# tokens; it drafts with --draft-fixed, since the default caps drafting at a share of the observed round trip scaled
# by what drafts have earned so far, which depends on the machine's speed (a CI machine once drafted 17 tokens in all
# and none answered a routed position).
gen --server "$url" -p "Once upon a time" --threshold 0.9 --sync --summary-json >/dev/null 2>"$tmp/sync.json"
gen --server "$url" -p "Once upon a time" --threshold 0.9 --simulate-rtt 20 --summary-json >/dev/null 2>"$tmp/hide.json"
gen --server "$url" -p "Once upon a time" --threshold 0.9 --simulate-rtt 20 --lookahead 0 --draft-fixed \
  --summary-json >/dev/null 2>"$tmp/draft.json"
python3 - "$tmp/sync.json" "$tmp/hide.json" "$tmp/draft.json" <<'PY' || fail "round trips not reduced"
import json, sys
a, b, c = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:4])
assert a["llm_blocking"] == a["n_routed"] == a["llm_calls"], a
for r in (b, c):
    assert r["llm_calls"] < a["llm_calls"] and r["lookahead_hits"] > 0, (a, r)
    assert r["llm_calls"] + r["lookahead_hits"] == r["n_routed"] == a["n_routed"], r
    assert r["llm_evaluated"] <= r["n_prompt"] + r["n_tokens"] + 9 * r["llm_calls"] + r["draft_tokens_verified"], r
assert c["draft_hits"] == c["lookahead_hits"] and c["draft_tokens_verified"] > 0, c
print(f"tau 0.9: --sync {a['llm_calls']} calls, default {b['llm_calls']} calls + {b['lookahead_hits']} hits "
      f"({b['draft_hits']} from drafts); --lookahead 0: {c['llm_calls']} calls + {c['draft_hits']} draft hits")
PY

# A backend that ignores drafts (--openai against the same server) gets one draft, then none: same tokens.
ref=$(gen --server "$url" -p "Once upon a time" --threshold 0.9 --sync --no-summary 2>/dev/null)
got=$(gen --openai "$url" -p "Once upon a time" --threshold 0.9 --draft-fixed --summary-json 2>"$tmp/oa.json")
[ "$got" == "$ref" ] || fail "--openai with drafts: $got != --sync $ref"
python3 - "$tmp/oa.json" <<'PY' || fail "drafting went on for a backend that ignores drafts: $(cat "$tmp/oa.json")"
import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert s["llm_calls"] > 3 and 0 < s["draft_tokens_sent"] <= 96 * 3 and s["draft_hits"] == 0, s
PY

# 3. The server dies while the loop speculates: fallback finishes on the SLM, gap marked, bounded in time.
# (tau 0.9 routes about half the tokens, so branches of SLM tokens are in flight; lookahead off keeps it slow enough.)
ref=$(gen --server "$url" -p "Once upon a time" --threshold 0.9 -n 60 --sync --no-summary 2>/dev/null)
start_s=$(date +%s)
"$cli" generate --slm "$slm" --server "$url" -p "Once upon a time" -n 60 --threshold 0.9 --ids --simulate-rtt 150 \
  --lookahead 0 --timeout-ms 1000 --retries 1 --trace "$tmp/kill.jsonl" --summary-json >"$tmp/kill.out" \
  2>"$tmp/kill.err" &
gen_pid=$!
sleep 0.5
crash_pid "$server_pid"
wait "$gen_pid" || fail "generation with a dead server failed: $(cat "$tmp/kill.err")"
[ $(($(date +%s) - start_s)) -lt 30 ] || fail "took too long after the server died"
python3 - "$tmp/kill.jsonl" "$ref" <<'PY' || fail "trace after the server died is wrong"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ref = [int(x) for x in sys.argv[2].split()]
assert len(rows) == 60
gap = next(i for i, r in enumerate(rows) if r.get("llm_unavailable"))
assert gap > 0
assert [r["id"] for r in rows[:gap]] == ref[:gap]
# After the gap: the SLM's tokens, routed ones marked unavailable — or LLM tokens an earlier reply had already
# answered for exactly that prefix (a draft walk or lookahead: "lookahead": true), never a new call's.
after = rows[gap:]
assert all(r["source"] == "slm" or r.get("lookahead") is True for r in after), after
assert all(r.get("llm_unavailable") is True for r in after if r["score"] < r["tau"] and r["source"] == "slm"), after
print(f"killed while speculating: {gap} tokens from the LLM, then {len(rows) - gap} on the SLM, marked")
PY

# 4. The same with --on-llm-failure error: exits non-zero with the error; what it printed is a prefix of the run.
port=$(free_port)
start_serve "$port"
"$cli" generate --slm "$slm" --server "$url" -p "Once upon a time" -n 60 --threshold 0.9 --ids --simulate-rtt 150 \
  --timeout-ms 1000 --retries 1 --on-llm-failure error --no-summary --lookahead 0 >"$tmp/err.out" 2>"$tmp/err.err" &
gen_pid=$!
sleep 0.6
crash_pid "$server_pid"
if wait "$gen_pid"; then fail "--on-llm-failure error succeeded with a dead server"; fi
grep -qi "server" "$tmp/err.err" || fail "no error message: $(cat "$tmp/err.err")"
got=$(tr -d '\n' <"$tmp/err.out")
[ -n "$got" ] || fail "nothing was generated before the crash"
case "$ref" in "$got"*) ;; *) fail "printed tokens '$got' are not a prefix of '$ref'" ;; esac
echo "error policy: stopped with the error after $(echo "$got" | wc -w) confirmed tokens"

# 5. Flags: bad values and --sync with either knob are usage errors (exit 2), with a message.
for bad in "--lookahead 17" "--speculate-depth -1" "--sync --lookahead 2" "--sync --speculate-depth 1" "--draft 257" \
  "--draft-width 9" "--draft-span 0" "--sync --draft 8"; do
  # shellcheck disable=SC2086
  if "$cli" generate --slm "$slm" --llm "$llm" -p "Once" -n 2 $bad >/dev/null 2>"$tmp/e"; then fail "accepted $bad"; fi
  # shellcheck disable=SC2086
  rc=0; "$cli" generate --slm "$slm" --llm "$llm" -p "Once" -n 2 $bad >/dev/null 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || fail "$bad: exit $rc, not 2"
  grep -q "lookahead\|speculate-depth\|draft" "$tmp/e" || fail "$bad: no message: $(cat "$tmp/e")"
done
echo "flags: bad values refused"

# 6. Near the end of the server's context the server refuses lookahead (400, field lookahead): the client asks again
# without it, so the run still equals --sync instead of failing. (Every position is routed and the lookahead keeps
# answering them, so the loop keeps asking for all 16.)
port=$(free_port)
start_serve "$port" -c 48
n400=$(grep -c " 400 " "$tmp/serve.log" || true)
ref=$(gen --server "$url" -p "Once upon a time" --threshold 1 -n 43 --ignore-eos --sync --no-summary 2>/dev/null)
got=$(gen --server "$url" -p "Once upon a time" --threshold 1 -n 43 --ignore-eos --lookahead 16 --draft 0 --simulate-rtt 100 \
  --summary-json 2>"$tmp/sum") || fail "near the context end: $(cat "$tmp/sum")"
[ "$got" == "$ref" ] || fail "near the context end: $got != --sync $ref"
grep -q '"n_fallback":0,' "$tmp/sum" || fail "fallback near the context end: $(cat "$tmp/sum")"
[ "$(grep -c " 400 " "$tmp/serve.log")" -gt "$n400" ] || fail "the server never refused a lookahead (test too weak)"
# A draft walk stops at the context end (the server evaluates no branch beyond it): same tokens.
got=$(gen --server "$url" -p "Once upon a time" --threshold 0.9 -n 43 --ignore-eos --draft 256 --draft-span 64 \
  --summary-json 2>"$tmp/sum") || fail "draft near the context end: $(cat "$tmp/sum")"
ref=$(gen --server "$url" -p "Once upon a time" --threshold 0.9 -n 43 --ignore-eos --sync --no-summary 2>/dev/null)
[ "$got" == "$ref" ] || fail "draft near the context end: $got != --sync $ref"
grep -q '"n_fallback":0,' "$tmp/sum" || fail "fallback with a draft near the context end: $(cat "$tmp/sum")"
echo "context end: lookahead dropped when refused, drafts cut, same tokens"

# 7. The protocol's draft field by hand: a walk answers along the branch whose first token is the answer, the
# server then holds the walked branch (a following pos counts it); malformed drafts get 400 naming the field.
python3 - "$url" <<'PY' || fail "draft protocol"
import json, sys, urllib.request, urllib.error
url = sys.argv[1]
def post(body):
    req = urllib.request.Request(url + "/v1/route/next", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
# The greedy continuation of [1, 403, 407], one call at a time.
seq = [1, 403, 407]
for i in range(6):
    st, r = post({"session": "g", "pos": len(seq) - 1, "tokens": seq[-1:]} if i else {"session": "g", "pos": 0, "tokens": seq})
    assert st == 200, r
    seq.append(r["token"])
g = seq[3:]
wrong = (g[0] + 1) % 512
st, r = post({"session": "d", "pos": 0, "tokens": [1, 403, 407],
              "draft": [{"parent": -1, "tokens": [wrong, 5]}, {"parent": -1, "tokens": g[0:2]},
                        {"parent": 1, "tokens": g[2:4]}]})
assert st == 200 and r["token"] == g[0] and r["verify"] == [g[2], g[4]], r
assert r["n_evaluated"] == 3 + 2 + 2, r
st, r = post({"session": "d", "pos": 7, "tokens": [g[4]]})
assert st == 200 and r["token"] == g[5] and r["n_evaluated"] == 1, r
for bad in ([{"parent": 0, "tokens": [1]}], [{"parent": -1, "tokens": []}], [{"parent": -1, "tokens": [9999]}],
            [{"tokens": [1]}], {"parent": -1}, [{"parent": -1, "tokens": [1]}] * 65):
    st, r = post({"session": "e", "pos": 0, "tokens": [1], "draft": bad})
    assert st == 400 and r["error"]["field"] == "draft", (bad, r)
print("draft protocol: walk, held branch, 400s")
PY
