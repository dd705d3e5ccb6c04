#!/usr/bin/env bash
# remote_llamacpp.sh — `generate --llamacpp` and `--openai` against a real llama.cpp server (built from
# node-llama-cpp's bundled source by scripts/llamacpp.sh, cached) on 127.0.0.1, free ports, bounded in time:
# routed output equals the embedded backend's token for token at several tau and in llm mode; lookahead streamed
# by llama.cpp (opt-in) answers routed tokens without a call and changes ids only at near-ties; the server killed
# mid-generation → the run finishes on the SLM, the trace marks the gap, no call waits past the timeout; the server
# restarted mid-generation → output unchanged; a server that accepts and never answers → bounded by the timeout
# and the circuit breaker; API keys (flag and TOKROUTE_API_KEY). Never skipped: a missing llama.cpp is a failure.
# usage: remote_llamacpp.sh CLI SHARED
set -euo pipefail
cli=$1
shared=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
llama_bin=$("$root/scripts/llamacpp.sh" llama-server) || { echo "FAIL: cannot build llama-server" >&2; exit 1; }
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
source "$root/tests/support/e2e.sh"

port=$(free_port)
start_llama_server "$port"
url=http://127.0.0.1:$port
gen() { "$cli" generate --slm "$slm" -n 48 --ids --no-summary "$@" 2>>"$tmp/stderr"; }

# 1. Token for token equal to the embedded backend, several tau (1 routes every token) and llm mode.
n_checked=0
for prompt in "Once upon a time" "Tom and his dog went to the park." "The little bird"; do
  for tau in 0.3 0.6 0.9 1; do
    ref=$(gen --llm "$llm" -p "$prompt" --threshold "$tau")
    [ -n "$ref" ] || fail "embedded run gave no tokens"
    for backend in --llamacpp --openai; do
      got=$(gen $backend "$url" -p "$prompt" --threshold "$tau")
      [ "$got" == "$ref" ] || fail "$backend tau $tau '$prompt': $got != embedded $ref"
      n_checked=$((n_checked + 1))
    done
  done
  ref=$(gen --llm "$llm" -p "$prompt" --mode llm)
  for backend in --llamacpp --openai; do
    [ "$(gen $backend "$url" -p "$prompt" --mode llm)" == "$ref" ] || fail "$backend llm mode differs"
  done
done
grep -q "remote LLM reports 512 tokens" "$tmp/stderr" || fail "no vocabulary line: $(head -3 "$tmp/stderr")"
echo "equal to embedded: $n_checked routed runs + llm mode"

# Lookahead through llama.cpp (--lookahead K: --llamacpp streams 1 + K greedy tokens; opt-in): routed tokens are
# answered from the stream without a call, and the ids equal --sync's up to llama.cpp's rounding: the tokens it
# decodes one at a time for the stream stay in its prompt cache, where later requests reuse them, and its
# single-token and batched passes round differently — so the first difference from --sync, if any, must be between
# llama.cpp's two best tokens after the common prefix, within 0.01 in log-probability (a near-tie). On a server of its own, so the
# other checks here see a cache that only plain requests filled. By default and with --openai: no lookahead.
main_pid=$llama_pid
la_port=$(free_port)
start_llama_server "$la_port"
la_pid=$llama_pid
llama_pid=$main_pid
la_url=http://127.0.0.1:$la_port
: >"$tmp/near_ties"
for prompt in "Once upon a time" "The little bird"; do
  for tau in 0.6 0.9 1; do
    args=(--slm "$slm" -p "$prompt" -n 64 --threshold "$tau" --ids)
    "$cli" tokenize -m "$slm" --ids "$prompt" >"$tmp/prompt.ids"
    "$cli" generate "${args[@]}" --llamacpp "$la_url" --sync --trace "$tmp/ref.jsonl" --no-summary >"$tmp/ref.ids" 2>/dev/null
    "$cli" generate "${args[@]}" --llamacpp "$la_url" --lookahead 8 --trace "$tmp/la.jsonl" --summary-json \
      >"$tmp/la.ids" 2>"$tmp/la.json"
    "$cli" generate "${args[@]}" --llamacpp "$la_url" --summary-json >/dev/null 2>"$tmp/plain.json"
    "$cli" generate "${args[@]}" --openai "$la_url" --summary-json >/dev/null 2>"$tmp/oa.json"
    LA_URL=$la_url python3 - "$tmp" <<'PY' >>"$tmp/near_ties" || fail "lookahead through llama.cpp, tau $tau '$prompt'"
import json, os, sys, urllib.request
t = sys.argv[1]
last = lambda f: json.loads(open(os.path.join(t, f)).read().strip().splitlines()[-1])
la, oa, plain = last("la.json"), last("oa.json"), last("plain.json")
assert plain["lookahead"] == 0 and plain["lookahead_hits"] == 0, plain
assert la["llm_calls"] + la["lookahead_hits"] == la["n_routed"] and la["lookahead_hits"] > 0, la
assert la["llm_calls"] < la["n_routed"] and la["llm_blocking"] <= la["llm_calls"], la
assert oa["lookahead_hits"] == 0 and oa["llm_calls"] == oa["n_routed"], oa
ref, got = (open(os.path.join(t, f)).read().split() for f in ("ref.ids", "la.ids"))
if ref != got:
    i = next(k for k in range(min(len(ref), len(got))) if ref[k] != got[k])
    r, g = ([json.loads(l) for l in open(os.path.join(t, f))][i] for f in ("ref.jsonl", "la.jsonl"))
    assert r["source"] == g["source"] == "llm", (i, r, g)
    # llama.cpp's own top two log-probabilities after the common prefix (a token from the stream has none in the
    # trace): the two tokens, within 0.01.
    prefix = [int(x) for x in open(os.path.join(t, "prompt.ids")).read().split()] + [int(x) for x in ref[:i]]
    req = urllib.request.Request(os.environ["LA_URL"] + "/completion", json.dumps(
        {"prompt": prefix, "n_predict": 1, "n_probs": 2, "temperature": 0, "cache_prompt": False}).encode(),
        {"Content-Type": "application/json"})
    top = json.loads(urllib.request.urlopen(req, timeout=30).read())["completion_probabilities"][0]["top_logprobs"]
    assert {e["id"] for e in top} == {r["id"], g["id"]} and abs(top[0]["logprob"] - top[1]["logprob"]) < 0.01, (i, r, g, top)
    print(f"near-tie at token {i}: {r['id']} vs {g['id']}, llama.cpp log-probabilities {top[0]['logprob']:.4f} and "
          f"{top[1]['logprob']:.4f}")
PY
  done
done
stop_pid "$la_pid"
echo "lookahead through llama.cpp: 6 runs, $(wc -l <"$tmp/near_ties") differ from --sync, each at a near-tie"
cat "$tmp/near_ties"

# The number routed must be meaningful at tau 0.6 (both models contribute).
"$cli" generate --slm "$slm" --llamacpp "$url" -p "Once upon a time" -n 48 --threshold 0.6 --ids --summary-json \
  >/dev/null 2>"$tmp/sum"
routed=$(grep -o '"n_routed":[0-9]*' "$tmp/sum" | cut -d: -f2)
[ "$routed" -ge 5 ] && [ "$routed" -le 43 ] || fail "routed $routed of 48"

# wait_tokens FILE N: waits (<= 60 s) until a running `generate --ids` has printed N ids (it flushes each one), so a
# crash lands mid-generation however slowly a loaded machine starts the client.
wait_tokens() {
  for _ in $(seq 1 600); do
    [ "$(wc -w <"$1")" -ge "$2" ] && return 0
    kill -0 "$gen_pid" 2>/dev/null || fail "the generation ended before $2 tokens: $(cat "$1")"
    sleep 0.1
  done
  fail "no $2 tokens in 60 s"
}

# 2. The server restarted mid-generation: the client retries within its timeout; output unchanged, no fallback.
ref=$(gen --llm "$llm" -p "Once upon a time" --threshold 1 -n 60)
"$cli" generate --slm "$slm" --llamacpp "$url" -p "Once upon a time" -n 60 --threshold 1 --ids --simulate-rtt 25 \
  --timeout-ms 15000 --retries 12 --trace "$tmp/restart.jsonl" --summary-json >"$tmp/restart.out" 2>"$tmp/restart.err" &
gen_pid=$!
wait_tokens "$tmp/restart.out" 5
crash_pid "$llama_pid"
sleep 0.3 # down for a while: calls in between fail and are retried
start_llama_server "$port"
wait "$gen_pid" || fail "generation across a restart failed: $(cat "$tmp/restart.err")"
[ "$(cat "$tmp/restart.out")" == "$ref" ] || fail "output changed across a restart"
grep -q '"n_fallback":0' "$tmp/restart.err" || fail "fallback across a restart: $(cat "$tmp/restart.err")"
# Proof that the server really was down in the middle: one call waited out the 300 ms downtime, retrying.
python3 -c 'import json,sys; assert max(json.loads(l)["llm_ms"] for l in open(sys.argv[1])) > 250' "$tmp/restart.jsonl" ||
  fail "no call spanned the restart"
echo "restart mid-generation: output unchanged"

# 3. The server killed mid-generation: finishes on the SLM, the gap is marked, no call waits past the timeout.
"$cli" generate --slm "$slm" --llamacpp "$url" -p "Once upon a time" -n 60 --threshold 1 --ids --simulate-rtt 25 \
  --timeout-ms 1000 --retries 1 --trace "$tmp/kill.jsonl" --summary-json >"$tmp/kill.out" 2>"$tmp/kill.err" &
gen_pid=$!
wait_tokens "$tmp/kill.out" 5
crash_pid "$llama_pid"
wait "$gen_pid" || fail "generation with a dead server failed: $(cat "$tmp/kill.err")"
[ "$(wc -w <"$tmp/kill.out")" -eq 60 ] || fail "not all 60 tokens: $(cat "$tmp/kill.out")"
python3 - "$tmp/kill.jsonl" "$ref" <<'PY' || fail "trace after the server died is wrong"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ref = [int(x) for x in sys.argv[2].split()]
first_gap = next(i for i, r in enumerate(rows) if r.get("llm_unavailable"))
assert first_gap > 0, "the server was up at the start"
assert [r["id"] for r in rows[:first_gap]] == ref[:first_gap], "tokens before the gap differ from the embedded run"
for r in rows[first_gap:]:
    assert r["source"] == "slm" and r.get("llm_unavailable") is True, r
assert max(r["llm_ms"] for r in rows) <= 1000 + 25 + 200, max(r["llm_ms"] for r in rows)
print(f"killed: {first_gap} tokens from the LLM, then {len(rows) - first_gap} on the SLM, marked")
PY
n_fb=$(grep -o '"n_fallback":[0-9]*' "$tmp/kill.err" | cut -d: -f2)
[ "$n_fb" -ge 1 ] || fail "summary does not count fallbacks"
# --on-llm-failure error: a dead server is an error (exit 1, one message, stdout empty).
if "$cli" generate --slm "$slm" --llamacpp "$url" -p "Once" -n 8 --threshold 1 --on-llm-failure error --retries 0 \
  >"$tmp/o" 2>"$tmp/e"; then fail "dead server accepted with --on-llm-failure error"; fi
grep -q "tokroute:.*llamacpp" "$tmp/e" || fail "error not named: $(cat "$tmp/e")"

# 4. A server that accepts and never answers: each call ends at the timeout, the breaker spares the rest.
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
print(s.getsockname()[1], flush=True)
held = []
end = time.time() + 60
s.settimeout(1)
while time.time() < end:
    try: held.append(s.accept()[0])
    except socket.timeout: pass
' >"$tmp/silent.port" &
pids+=($!)
for _ in $(seq 1 50); do [ -s "$tmp/silent.port" ] && break; sleep 0.1; done
silent=http://127.0.0.1:$(cat "$tmp/silent.port")
start=$(date +%s%N)
"$cli" generate --slm "$slm" --openai "$silent" -p "Once upon a time" -n 40 --threshold 1 --ids --timeout-ms 300 \
  --trace "$tmp/silent.jsonl" --summary-json >"$tmp/o" 2>"$tmp/e" || fail "silent server: $(cat "$tmp/e")"
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$(wc -w <"$tmp/o")" -eq 40 ] || fail "silent server: not all tokens"
python3 - "$tmp/silent.jsonl" <<'PY' || fail "silent server trace"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert all(r["llm_unavailable"] and r["source"] == "slm" for r in rows)
assert max(r["llm_ms"] for r in rows) <= 300 + 150, max(r["llm_ms"] for r in rows)
waited = sum(1 for r in rows if r["llm_ms"] > 100)
assert waited <= 3, f"{waited} calls waited out the timeout (the breaker should have opened)"
PY
[ "$elapsed_ms" -lt 5000 ] || fail "silent server: took $elapsed_ms ms"
echo "silent server: 40 tokens in $elapsed_ms ms, each call bounded by the timeout"

# 5. API keys: without the key the server refuses (a clear error, no silent fallback); with it, the same tokens.
port2=$(free_port)
start_llama_server "$port2" --api-key sekrit
ref=$(gen --llm "$llm" -p "Once upon a time" --threshold 0.6)
if gen --llamacpp "http://127.0.0.1:$port2" -p "Once upon a time" --threshold 0.6 >/dev/null 2>"$tmp/e"; then
  fail "accepted without the API key"
fi
[ "$(gen --llamacpp "http://127.0.0.1:$port2" -p "Once upon a time" --threshold 0.6 --api-key sekrit)" == "$ref" ] ||
  fail "--api-key run differs"
[ "$(TOKROUTE_API_KEY=sekrit gen --openai "http://127.0.0.1:$port2" -p "Once upon a time" --threshold 0.6)" == "$ref" ] ||
  fail "TOKROUTE_API_KEY run differs"
grep -q "401" "$tmp/stderr" || fail "401 not reported"

# 6. Bad flags: one clear line each.
if "$cli" generate --slm "$slm" --llamacpp ftp://x -p hi -n 1 2>"$tmp/e" >/dev/null; then fail "ftp URL accepted"; fi
grep -q "http://" "$tmp/e" || fail "bad URL not explained"
if "$cli" generate --slm "$slm" --llm "$llm" --openai "$url" -p hi 2>"$tmp/e" >/dev/null; then fail "two LLMs accepted"; fi
if "$cli" generate --slm "$slm" --llamacpp "$url" --timeout-ms 0 -p hi 2>"$tmp/e" >/dev/null; then fail "timeout 0"; fi
echo "remote llama.cpp e2e: all checks passed"
