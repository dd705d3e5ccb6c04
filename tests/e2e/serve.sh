#!/usr/bin/env bash
# serve.sh — `tokroute serve` as real processes on 127.0.0.1 (free ports via --port 0 and --ready-file): the session
# protocol (200, 409 and resync, rollback, lookahead, n_vocab, seeded sampling), every error status (400 naming the
# field, 401, 404, 413), DELETE, idle expiry, LRU eviction under a small KV budget, /v1/completions (plain and
# streamed), /health, /metrics, TLS with a self-signed certificate, a load test of 32 sessions x 200 routed calls
# checked token by token against the model run locally with peak RSS within the KV budget plus the model, and
# shutdown on SIGTERM and SIGINT. Every wait is bounded.
set -euo pipefail
cli=$1
shared=$2
model=$shared/models/stories260K.gguf
bindir=$(dirname "$cli")
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$tmp"/*.log; do [ -f "$f" ] && tail -5 "$f" >&2; done; exit 1; }

# start NAME ARGS...: starts a server, waits (<= 20 s) for its ready file, sets $url and $pid.
start() {
  local name=$1; shift
  rm -f "$tmp/$name.ready"
  "$cli" serve -m "$model" --port 0 --ready-file "$tmp/$name.ready" -t 2 "$@" 2>"$tmp/$name.log" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 200); do
    [ -s "$tmp/$name.ready" ] && break
    kill -0 "$pid" 2>/dev/null || fail "server $name exited: $(cat "$tmp/$name.log")"
    sleep 0.1
  done
  [ -s "$tmp/$name.ready" ] || fail "server $name not ready in 20 s"
  url=$(cat "$tmp/$name.ready")
}

# stop PID [SIGNAL]: SIGTERM (or SIGNAL), then it must exit 0 within 10 s.
stop() {
  local p=$1 sig=${2:-TERM}
  kill -"$sig" "$p"
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && fail "server did not stop within 10 s of SIG$sig"
  wait "$p" || fail "server exited with status $? after SIG$sig"
}

# --- usage errors
grep -q -- "--ready-file" <<<"$("$cli" serve --help)" || fail "serve --help"
set +e
"$cli" serve -m "$model" --tls-cert x.pem 2>/dev/null; [ $? -eq 2 ] || fail "--tls-cert without --tls-key must be a usage error"
"$cli" serve 2>/dev/null; [ $? -eq 2 ] || fail "serve without -m must be a usage error"
set -e

# --- the protocol, auth and bad input (one server with an API key, 4 KiB bodies, 256-token sessions)
start main --api-key s3cret --max-body-kib 4 -c 256 --session-idle-s 4
case $url in http://127.0.0.1:*) ;; *) fail "ready file holds '$url'";; esac
main_pid=$pid
# /health is public (probes hold no key) but without the key says only that the server is up
[ "$(curl -s -m 10 "$url/health")" = '{"status":"ok"}' ] || fail "no key: /health must answer {\"status\":\"ok\"} alone"
[ "$(curl -s -m 10 -H 'Authorization: Bearer s3cre' "$url/health")" = '{"status":"ok"}' ] || fail "wrong key: /health"
curl -s -m 10 -H 'Authorization: Bearer s3cret' "$url/health" | grep -q '"n_ctx":256' || fail "right key: /health"
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$url/v1/models")
[ "$code" = 401 ] || fail "no key: /v1/models $code"
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer s3cre' "$url/metrics")
[ "$code" = 401 ] || fail "wrong key: /metrics $code"
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -X POST "$url/health")
[ "$code" = 401 ] || fail "no key: POST /health $code"

python3 - "$url" "$model" <<'PY'
import http.client, json, sys, time, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=20)
KEY = {"Authorization": "Bearer s3cret", "Content-Type": "application/json"}

def call(method, path, body=None, raw=None, headers=KEY):
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    text = r.read().decode()
    try:
        return r.status, json.loads(text) if text else None
    except ValueError:
        return r.status, text

def nxt(body):
    return call("POST", "/v1/route/next", body)

def expect_error(status, code, field, body=None, raw=None):
    s, j = call("POST", "/v1/route/next", body, raw)
    assert s == status, (s, j, body, raw)
    assert j["error"]["code"] == code, j
    if field is not None:
        assert j["error"].get("field") == field, (j, field)
    return j

s, h = call("GET", "/health")
assert s == 200 and h["status"] == "ok" and h["n_vocab"] == 512, h

# A session: prompt, then one token at a time; the server's answer is its greedy next token.
prompt = [1, 403, 407, 261, 378, 432, 383]
s, r = nxt({"session": "dev1", "pos": 0, "tokens": prompt, "top_logprobs": 3})
assert s == 200, r
assert r["pos"] == 7 and r["n_evaluated"] == 7 and r["session"] == "dev1", r
assert len(r["top_logprobs"]) == 3 and r["top_logprobs"][0]["id"] == r["token"], r
assert r["logprob"] <= 0 and r["top_logprobs"][0]["logprob"] >= r["top_logprobs"][1]["logprob"], r
assert set(r["timings"]) == {"eval_ms", "queue_ms", "queue_passes"}, r
seq = prompt + [r["token"]]
for _ in range(5):
    s, r = nxt({"session": "dev1", "pos": len(seq) - 1, "tokens": [seq[-1]]})
    assert s == 200 and r["n_evaluated"] == 1 and r["pos"] == len(seq), r
    seq.append(r["token"])

# Same tokens in a fresh session in one request: the same next token (the KV cache is exact).
s, r2 = nxt({"session": "dev2", "pos": 0, "tokens": seq[:-1]})
assert s == 200 and r2["token"] == seq[-1], (r2, seq)

# Rollback: pos below what the server holds truncates; a different continuation is evaluated.
s, r = nxt({"session": "dev1", "pos": 7, "tokens": [17, 500]})
assert s == 200 and r["pos"] == 9 and r["n_evaluated"] == 2, r
s, ref = nxt({"session": "ref", "pos": 0, "tokens": prompt + [17, 500]})
assert ref["token"] == r["token"], (ref, r)

# Empty tokens with pos > 0: the logits at pos-1 again.
s, r3 = nxt({"session": "dev1", "pos": 9, "tokens": []})
assert s == 200 and r3["token"] == r["token"] and r3["pos"] == 9, r3

# 409: pos beyond what the server holds; unknown session with pos > 0. The body carries the server's pos.
j = expect_error(409, "pos_mismatch", None, {"session": "dev1", "pos": 12, "tokens": [5]})
assert j["pos"] == 9, j
j = expect_error(409, "pos_mismatch", None, {"session": "never-seen", "pos": 4, "tokens": [5]})
assert j["pos"] == 0, j
# ... and the client resyncs by resending from the server's pos.
s, r = nxt({"session": "never-seen", "pos": 0, "tokens": prompt})
assert s == 200 and r["token"] == seq[len(prompt)], r

# Lookahead: K further greedy tokens, equal to what one-at-a-time calls give; they stay in the cache.
s, r = nxt({"session": "la", "pos": 0, "tokens": prompt, "lookahead": 4})
assert s == 200 and r["pos"] == 7 and len(r["lookahead"]) == 4 and r["n_evaluated"] == 11, r
assert [r["token"]] + r["lookahead"] == seq[7:12], (r, seq)
s, r = nxt({"session": "la", "pos": 11, "tokens": []})      # the server holds prompt + token + 3 lookahead
assert s == 200 and r["token"] == seq[11] and r["n_evaluated"] == 1, (r, seq)
s, r = nxt({"session": "la", "pos": 11, "tokens": [seq[11]]})
assert s == 200 and r["token"] == seq[12], (r, seq)

# n_vocab restricts the choice to ids < n_vocab.
s, r = nxt({"session": "nv", "pos": 0, "tokens": prompt, "n_vocab": 10, "top_logprobs": 5})
assert s == 200 and r["token"] < 10 and all(t["id"] < 10 for t in r["top_logprobs"]), r

# Sampling: the draw depends only on (seed, position): resending a position gives the same token.
draws = []
for sess in ("smp-a", "smp-b"):
    s, r = nxt({"session": sess, "pos": 0, "tokens": prompt, "temperature": 1.5, "seed": 42, "top_k": 50})
    assert s == 200, r
    draws.append(r["token"])
s, r = nxt({"session": "smp-a", "pos": 7, "tokens": [], "temperature": 1.5, "seed": 42, "top_k": 50})
draws.append(r["token"])
assert len(set(draws)) == 1, draws
toks = set()
for seed in range(20):
    s, r = nxt({"session": "smp-c", "pos": 0, "tokens": [1], "temperature": 2.0, "seed": seed})
    toks.add(r["token"])
assert len(toks) > 1, toks

# 400 naming the field.
expect_error(400, "bad_request", None, raw="{not json")
expect_error(400, "bad_request", None, raw="[1,2,3]")
expect_error(400, "bad_request", "session", {"pos": 0, "tokens": [1]})
expect_error(400, "bad_request", "session", {"session": "bad id!", "pos": 0, "tokens": [1]})
expect_error(400, "bad_request", "session", {"session": "x" * 65, "pos": 0, "tokens": [1]})
expect_error(400, "bad_request", "pos", {"session": "t", "pos": "3", "tokens": [1]})
expect_error(400, "bad_request", "pos", {"session": "t", "pos": -1, "tokens": [1]})
expect_error(400, "bad_request", "pos", {"session": "t", "pos": 1.5, "tokens": [1]})
expect_error(400, "bad_request", "pos", {"session": "t", "tokens": [1]})
expect_error(400, "bad_request", "tokens", {"session": "t", "pos": 0, "tokens": "1,2"})
expect_error(400, "bad_request", "tokens", {"session": "t", "pos": 0, "tokens": [1, 512]})
expect_error(400, "bad_request", "tokens", {"session": "t", "pos": 0, "tokens": [-1]})
expect_error(400, "bad_request", "tokens", {"session": "t", "pos": 0, "tokens": [1, "2"]})
expect_error(400, "bad_request", "tokens", {"session": "t", "pos": 0, "tokens": []})
expect_error(400, "bad_request", "tokens", {"session": "t", "pos": 0, "tokens": [1] * 257})
expect_error(400, "bad_request", "tokens", {"session": "dev1", "pos": 200, "tokens": [1] * 57})
expect_error(400, "bad_request", "top_logprobs", {"session": "t", "pos": 0, "tokens": [1], "top_logprobs": 21})
expect_error(400, "bad_request", "n_vocab", {"session": "t", "pos": 0, "tokens": [1], "n_vocab": 513})
expect_error(400, "bad_request", "lookahead", {"session": "t", "pos": 0, "tokens": [1], "lookahead": 17})
expect_error(400, "bad_request", "temperature", {"session": "t", "pos": 0, "tokens": [1], "temperature": "hot"})
# 413: a body above the limit (4 KiB here).
s, j = call("POST", "/v1/route/next", {"session": "big", "pos": 0, "tokens": [1] * 3000})
assert s == 413 and j["error"]["code"] == "too_large", (s, j)
conn.close()
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=20)
# 401 on the protocol route too.
s, j = call("POST", "/v1/route/next", {"session": "dev1", "pos": 0, "tokens": [1]},
           headers={"Content-Type": "application/json"})
assert s == 401 and j["error"]["code"] == "unauthorized", (s, j)
# After all that, the earlier sessions are intact.
s, r = nxt({"session": "dev1", "pos": 9, "tokens": []})
assert s == 200 and r["token"] == r3["token"], r

# DELETE: 204, then 404; unknown route 404.
s, _ = call("DELETE", "/v1/route/sessions/dev2")
assert s == 204, s
s, j = call("DELETE", "/v1/route/sessions/dev2")
assert s == 404 and j["error"]["code"] == "not_found", (s, j)
j = expect_error(409, "pos_mismatch", None, {"session": "dev2", "pos": 3, "tokens": [5]})
s, j = call("GET", "/v1/nothing")
assert s == 404, s

# Completions: token-id prompt, greedy, logprobs; the generated ids equal the session protocol's.
s, c = call("POST", "/v1/completions", {"model": "x", "prompt": prompt, "max_tokens": 5, "temperature": 0,
                                         "logprobs": 2})
assert s == 200, c
ch = c["choices"][0]
assert c["object"] == "text_completion" and ch["token_ids"] == seq[7:12], (c, seq)
assert ch["finish_reason"] == "length" and c["usage"]["completion_tokens"] == 5, c
assert len(ch["logprobs"]["token_logprobs"]) == 5 and len(ch["logprobs"]["top_logprobs"][0]) == 2, ch
s, c = call("POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
assert s == 200 and c["choices"][0]["text"].startswith(","), c
s, j = call("POST", "/v1/completions", {"prompt": 5})
assert s == 400 and j["error"]["field"] == "prompt", j
s, j = call("POST", "/v1/completions", {"prompt": [1, 2], "max_tokens": -1})
assert s == 400 and j["error"]["field"] == "max_tokens", j

# Idle expiry (--session-idle-s 4): an unused session is gone after a few seconds.
time.sleep(6)
j = expect_error(409, "pos_mismatch", None, {"session": "dev1", "pos": 9, "tokens": []})
assert j["pos"] == 0, j
print("protocol ok")
PY

# Streaming completions (server-sent events) with curl.
curl -H 'Content-Type: application/json' -sS -m 20 -N -H 'Authorization: Bearer s3cret' "$url/v1/completions" \
  -d '{"prompt":[1,403,407,261,378,432,383],"max_tokens":5,"temperature":0,"stream":true}' >"$tmp/sse.txt"
python3 - "$tmp/sse.txt" <<'PY'
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events
chunks = [json.loads(e) for e in events[:-1]]
assert len(chunks) == 5, chunks
ids = [c["choices"][0]["token_ids"][0] for c in chunks]
assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[0]["choices"][0]["finish_reason"] is None
assert chunks[-1]["usage"]["completion_tokens"] == 5
print("stream ok", ids)
PY

# Metrics in Prometheus text.
curl -sS -m 10 -H 'Authorization: Bearer s3cret' "$url/metrics" >"$tmp/metrics.txt"
for m in 'tokroute_requests_total{route="route_next",status="200"}' 'tokroute_requests_total{route="route_next",status="409"}' \
  'tokroute_requests_total{route="route_next",status="400"}' 'tokroute_requests_total{route="route_next",status="401"}' \
  'tokroute_requests_total{route="route_next",status="413"}' tokroute_tokens_evaluated_total tokroute_active_sessions \
  tokroute_session_evictions_total tokroute_session_expirations_total 'tokroute_batch_sessions_bucket{le="1"}' \
  'tokroute_request_duration_seconds_bucket{route="route_next",le="+Inf"}'; do
  grep -qF "$m" "$tmp/metrics.txt" || fail "metrics lack $m"
done
awk '/^tokroute_session_expirations_total/ { exit !($2 >= 1) }' "$tmp/metrics.txt" || fail "no expiration counted"
# Nothing of the requests' tokens is logged by default.
grep -q "403,407" "$tmp/main.log" && fail "token ids logged without --log-requests"
grep -q "route_next 200" "$tmp/main.log" || fail "no request log line"
stop "$main_pid"
[ -e "$tmp/main.ready" ] && fail "ready file left after shutdown"

# --- LRU eviction under a small KV budget: sessions beyond it evict the least recently used.
start evict --kv-budget-mib 1 -c 2048
python3 - "$url" <<'PY'
import http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=20)
def nxt(b):
    conn.request("POST", "/v1/route/next", json.dumps(b), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())
# stories260K: 5 layers x 32 KV width x 2 (K,V) x F16 = 640 bytes per position; a 300-token session grows its
# cache to 512 positions (330 KiB), so 1 MiB holds three of them.
for i in range(5):
    s, r = nxt({"session": f"s{i}", "pos": 0, "tokens": [1] + [300 + i] * 299})
    assert s == 200, (i, r)
s, r = nxt({"session": "s0", "pos": 300, "tokens": []})
assert s == 409 and r["pos"] == 0, (s, r)     # s0, the least recently used, was evicted
s, r = nxt({"session": "s4", "pos": 300, "tokens": []})
assert s == 200, (s, r)                       # the most recent one is still there
s, r = nxt({"session": "huge", "pos": 0, "tokens": [1] * 2000})
assert s == 503 and r["error"]["code"] == "busy", (s, r)   # more than the whole budget
conn.request("GET", "/metrics"); m = conn.getresponse().read().decode()
ev = [l for l in m.splitlines() if l.startswith("tokroute_session_evictions_total")][0]
assert int(ev.split()[1]) >= 1, ev
print("eviction ok")
PY
stop "$pid"

# --- load: 32 sessions x 200 routed calls, 0 errors, every token checked; peak RSS within budget + model.
budget_mib=16
start load --kv-budget-mib $budget_mib --quiet
"$bindir/serve_load" --url "$url" --sessions 32 --calls 200 --deadline-s 300 --check "$model" >"$tmp/load.json" \
  || fail "load: $(cat "$tmp/load.json")"
hwm_kib=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
model_kib=$(( $(stat -c %s "$model") / 1024 ))
# Allowance for what is not KV or weights: code and shared libraries (~10 MiB), the batch engine's buffers,
# connection threads' touched stacks.
limit_kib=$(( budget_mib * 1024 + model_kib + 32 * 1024 ))
# Under AddressSanitizer (make test-asan) shadow memory and the quarantine inflate RSS by design: the bound is
# checked by the Release pass; the sanitizer pass still runs the load and the token check.
# (ldd's output is read whole: `ldd | grep -q` under pipefail fails when grep exits early and ldd gets SIGPIPE.)
case "$(ldd "$cli" 2>/dev/null)" in *libasan*) limit_kib=$(( 1 << 30 )) ;; esac
python3 - "$tmp/load.json" "$hwm_kib" "$limit_kib" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
hwm, limit = int(sys.argv[2]), int(sys.argv[3])
assert r["calls"] == 6400 and r["errors"] == 0 and r["check_mismatches"] == 0, r
assert hwm <= limit, f"peak RSS {hwm} KiB > {limit} KiB"
print(f"load ok: {r['calls']} calls, {r['tokens_per_s']} tokens/s, p50 {r['p50_ms']} ms, peak RSS {hwm} KiB <= {limit} KiB")
PY
stop "$pid"

# --- TLS: a self-signed certificate; curl verifies it with --cacert and refuses without.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 1 \
  -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
start tls --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem"
case $url in https://127.0.0.1:*) ;; *) fail "TLS ready file holds '$url'";; esac
curl -sS -m 10 --cacert "$tmp/cert.pem" "$url/health" | grep -q '"status":"ok"' || fail "TLS health"
out=$(curl -H 'Content-Type: application/json' -sS -m 10 --cacert "$tmp/cert.pem" "$url/v1/route/next" -d '{"session":"t","pos":0,"tokens":[1,403]}')
echo "$out" | grep -q '"pos":2' || fail "TLS route: $out"
curl -s -m 10 -o /dev/null "$url/health" && fail "TLS without the CA must fail verification"
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://${url#https://}/health" || true)
[ "$code" = 200 ] && fail "plain HTTP answered on the TLS port"
"$bindir/serve_load" --url "$url" --cacert "$tmp/cert.pem" --sessions 4 --calls 20 --deadline-s 60 >/dev/null \
  || fail "load over TLS"
stop "$pid"

# --- a bad TLS key and a taken port fail cleanly with status 1.
echo "not a key" >"$tmp/bad.pem"
set +e
"$cli" serve -m "$model" --port 0 --tls-cert "$tmp/cert.pem" --tls-key "$tmp/bad.pem" 2>"$tmp/badtls.log"
[ $? -eq 1 ] || fail "bad TLS key must fail with status 1"
set -e
start taken
port=${url##*:}
set +e
"$cli" serve -m "$model" --port "$port" 2>"$tmp/taken2.log"
[ $? -eq 1 ] || fail "a taken port must fail with status 1"
set -e
stop "$pid" INT   # Ctrl-C shuts down as cleanly as SIGTERM
echo "serve e2e ok"
