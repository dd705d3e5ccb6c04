#!/usr/bin/env bash
# remote_server.sh — `generate --server` (session protocol) and `--openai` against a real `tokroute serve` on
# 127.0.0.1, bounded in time: routed output equals the embedded backend's token for token at several tau and in
# llm mode; the server restarted mid-generation (sessions lost → 409 → the client resends transparently) → output
# unchanged; the server killed mid-generation → finishes on the SLM, the gap marked, no call past the timeout;
# --openai given the OpenAI base URL (".../v1"); API keys; https with a self-signed certificate (openssl) trusted
# through --cacert and refused without it.
# usage: remote_server.sh CLI SHARED
set -euo pipefail
cli=$1
shared=$2
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
source "$(dirname "$0")/../support/e2e.sh"
gen() { "$cli" generate --slm "$slm" -n 48 --ids --no-summary "$@" 2>>"$tmp/stderr"; }

port=$(free_port)
start_serve "$port"

# 1. Token for token equal to the embedded backend.
n_checked=0
for prompt in "Once upon a time" "Tom and his dog went to the park." "The little bird"; do
  for tau in 0.3 0.6 0.9 1; do
    ref=$(gen --llm "$llm" -p "$prompt" --threshold "$tau")
    for backend in --server --openai; do
      got=$(gen $backend "$url" -p "$prompt" --threshold "$tau")
      [ "$got" == "$ref" ] || fail "$backend tau $tau '$prompt': $got != embedded $ref"
      n_checked=$((n_checked + 1))
    done
  done
  ref=$(gen --llm "$llm" -p "$prompt" --mode llm)
  for backend in --server --openai; do
    [ "$(gen $backend "$url" -p "$prompt" --mode llm)" == "$ref" ] || fail "$backend llm mode differs"
  done
done
# Equal sizes read as what they are, not as a problem.
grep -q "vocabulary: remote LLM reports 512 tokens, as many as the SLM has$" "$tmp/stderr" ||
  fail "vocabulary line: $(grep vocabulary "$tmp/stderr" | head -1)"
echo "equal to embedded: $n_checked routed runs + llm mode"
# The session protocol evaluates each token once on the server: llm_evaluated = prompt + generated - 1.
"$cli" generate --slm "$slm" --server "$url" -p "Once upon a time" -n 48 --mode llm --ids --summary-json \
  >/dev/null 2>"$tmp/sum"
grep -q '"llm_evaluated":52,' "$tmp/sum" || fail "server evaluated more than each token once: $(cat "$tmp/sum")"
# --openai takes the base URL OpenAI clients are given (".../v1", with or without a slash) as well as the root; a
# collect through it collects (it requested /v1/v1/completions, got 404 and left a folder holding only a header).
ref=$(gen --llm "$llm" -p "Once upon a time" --threshold 0.6)
for base in "$url/v1" "$url/v1/" "$url/"; do
  [ "$(gen --openai "$base" -p "Once upon a time" --threshold 0.6)" == "$ref" ] || fail "--openai $base differs"
done
"$cli" collect --slm "$slm" --openai "$url/v1" --data "$shared/data/tinystories/tinystories_val.txt" --format text \
  --range 0:1 --out "$tmp/v1-collect" -t 1 >/dev/null 2>"$tmp/v1-collect.err" ||
  fail "collect through --openai URL/v1: $(cat "$tmp/v1-collect.err")"
[ "$(stat -c %s "$tmp/v1-collect/index.bin")" -gt 8 ] || fail "collect through --openai URL/v1 collected nothing"

# 2. Restarted mid-generation: the new server has no session, answers 409 (pos 0), the client resends; unchanged.
# (--sync: every token a call, so one call surely spans the downtime; the default loop's failure handling is
# checked in hide.sh.)
ref=$(gen --llm "$llm" -p "Once upon a time" --threshold 1 -n 60)
"$cli" generate --slm "$slm" --server "$url" -p "Once upon a time" -n 60 --threshold 1 --ids --simulate-rtt 25 --sync \
  --timeout-ms 15000 --retries 12 --trace "$tmp/restart.jsonl" --summary-json >"$tmp/restart.out" 2>"$tmp/restart.err" &
gen_pid=$!
sleep 0.6
crash_pid "$server_pid"
sleep 0.3 # down for a while: calls in between fail and are retried
start_serve "$port"
wait "$gen_pid" || fail "generation across a restart failed: $(cat "$tmp/restart.err")"
[ "$(cat "$tmp/restart.out")" == "$ref" ] || fail "output changed across a restart"
grep -q '"n_fallback":0' "$tmp/restart.err" || fail "fallback across a restart: $(cat "$tmp/restart.err")"
# Proof that the server really was down in the middle: one call waited out the 300 ms downtime, retrying.
python3 -c 'import json,sys; assert max(json.loads(l)["llm_ms"] for l in open(sys.argv[1])) > 250' "$tmp/restart.jsonl" ||
  fail "no call spanned the restart"
curl -sf "$url/metrics" >"$tmp/metrics" || fail "no /metrics"
grep -Eq 'status="409"\} [1-9]' "$tmp/metrics" ||
  fail "the restarted server never answered 409 (no resync happened): $(grep requests_total "$tmp/metrics")"
grep -Eq 'route="route_delete",status="204"\} [1-9]' "$tmp/metrics" || fail "the client did not delete its session"
echo "restart mid-generation: 409, resync, output unchanged; session deleted at the end"

# Two clients at once on one server: random session ids, no interference.
gen --server "$url" -p "Once upon a time" --threshold 1 -n 60 >"$tmp/c1" &
c1=$!
gen --server "$url" -p "Once upon a time" --threshold 1 -n 60 >"$tmp/c2" &
c2=$!
wait "$c1" && wait "$c2" || fail "concurrent clients failed"
[ "$(cat "$tmp/c1")" == "$ref" ] && [ "$(cat "$tmp/c2")" == "$ref" ] || fail "concurrent clients interfered"

# Sampling on the server (--temp): draws depend only on (seed, position), so a run across a restart (resync)
# draws exactly the tokens of an undisturbed run; another seed draws others.
sampled=(-p "Once upon a time" -n 60 --threshold 1 --temp 0.9 --top-k 0 --seed 7)
ref_s=$(gen --server "$url" "${sampled[@]}")
[ "$ref_s" != "$ref" ] || fail "--temp 0.9 drew the greedy tokens"
[ "$(gen --server "$url" "${sampled[@]}")" == "$ref_s" ] || fail "sampling is not reproducible"
[ "$(gen --server "$url" -p "Once upon a time" -n 60 --threshold 1 --temp 0.9 --top-k 0 --seed 8)" != "$ref_s" ] ||
  fail "another seed drew the same tokens"
"$cli" generate --slm "$slm" --server "$url" "${sampled[@]}" --ids --no-summary --simulate-rtt 25 --timeout-ms 15000 \
  --retries 12 >"$tmp/restart_s.out" 2>"$tmp/restart_s.err" &
gen_pid=$!
sleep 0.6
crash_pid "$server_pid"
sleep 0.3
start_serve "$port"
wait "$gen_pid" || fail "sampled generation across a restart failed: $(cat "$tmp/restart_s.err")"
[ "$(cat "$tmp/restart_s.out")" == "$ref_s" ] || fail "sampled output changed across a restart"
echo "sampling on the server: reproducible, unchanged across a restart"

# 3. Killed mid-generation: finishes on the SLM, the gap is marked, no call waits past the timeout.
"$cli" generate --slm "$slm" --server "$url" -p "Once upon a time" -n 60 --threshold 1 --ids --simulate-rtt 25 --sync \
  --timeout-ms 1000 --retries 1 --trace "$tmp/kill.jsonl" --summary-json >"$tmp/kill.out" 2>"$tmp/kill.err" &
gen_pid=$!
sleep 0.6
crash_pid "$server_pid"
wait "$gen_pid" || fail "generation with a dead server failed: $(cat "$tmp/kill.err")"
python3 - "$tmp/kill.jsonl" "$ref" <<'PY' || fail "trace after the server died is wrong"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ref = [int(x) for x in sys.argv[2].split()]
assert len(rows) == 60
first_gap = next(i for i, r in enumerate(rows) if r.get("llm_unavailable"))
assert first_gap > 0
assert [r["id"] for r in rows[:first_gap]] == ref[:first_gap]
assert all(r["source"] == "slm" and r.get("llm_unavailable") is True for r in rows[first_gap:])
assert max(r["llm_ms"] for r in rows) <= 1000 + 25 + 200
print(f"killed: {first_gap} tokens from the LLM, then {len(rows) - first_gap} on the SLM, marked")
PY

# 4. API key: refused without it (an error, not a silent fallback), the same tokens with it.
port=$(free_port)
start_serve "$port" --api-key sekrit
ref=$(gen --llm "$llm" -p "Once upon a time" --threshold 0.6)
if "$cli" generate --slm "$slm" --server "$url" -p "Once upon a time" -n 8 --threshold 1 >/dev/null 2>"$tmp/e"; then
  fail "accepted without the key"
fi
grep -q "401" "$tmp/e" || fail "401 not reported: $(cat "$tmp/e")"
[ "$(gen --server "$url" -p "Once upon a time" --threshold 0.6 --api-key sekrit)" == "$ref" ] || fail "--api-key run"
[ "$(TOKROUTE_API_KEY=sekrit gen --openai "$url" -p "Once upon a time" --threshold 0.6)" == "$ref" ] ||
  fail "TOKROUTE_API_KEY run"
stop_pid "$server_pid"

# 5. https with a self-signed certificate for 127.0.0.1: trusted with --cacert, refused (an error) without it.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null || fail "openssl could not make a certificate"
port=$(free_port)
start_serve "$port" --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem"
case "$url" in https://*) ;; *) fail "TLS server announced $url" ;; esac
[ "$(gen --server "$url" -p "Once upon a time" --threshold 0.6 --cacert "$tmp/cert.pem")" == "$ref" ] ||
  fail "https run differs"
if "$cli" generate --slm "$slm" --server "$url" -p "Once upon a time" -n 8 --threshold 1 >"$tmp/o" 2>"$tmp/e"; then
  fail "an unverified certificate was accepted"
fi
[ ! -s "$tmp/o" ] || fail "stdout not empty after the certificate error"
grep -qi "certificate" "$tmp/e" || fail "certificate error not explained: $(cat "$tmp/e")"
echo "remote server e2e: all checks passed"
