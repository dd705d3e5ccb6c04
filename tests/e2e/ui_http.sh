#!/usr/bin/env bash
# ui_http.sh — `tokroute ui` over HTTP with curl, as the page uses it: the embedded page and /api/info; the event
# stream of POST /api/generate (token events whose text equals `tokroute generate`'s output for the same settings,
# routed tokens below tau with the SLM's proposal, a final summary that counts them); every kind of bad request
# answered with a 4xx and a JSON message while the server keeps serving; POST /api/cancel and a dropped connection
# both stopping a generation on the server; several generations at once and 429 beyond the limit; SIGTERM during a
# generation. The server runs on 127.0.0.1 on a free port (--port 0 --ready-file) and is always stopped.
set -euo pipefail
cli=$1
shared=$2
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
tmp=$(mktemp -d)
pid=
llm_pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  [ -n "$llm_pid" ] && kill "$llm_pid" 2>/dev/null && wait "$llm_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  [ -f "$tmp/server.log" ] && sed 's/^/server: /' "$tmp/server.log" >&2
  exit 1
}
pass() { echo "ok   $*"; }

# Starts the server with extra flags; sets $url.
start_server() {
  rm -f "$tmp/ready"
  "$cli" ui --slm "$slm" --llm "$llm" --port 0 --ready-file "$tmp/ready" "$@" 2>"$tmp/server.log" &
  pid=$!
  for _ in $(seq 300); do
    [ -s "$tmp/ready" ] && break
    kill -0 "$pid" 2>/dev/null || fail "the server exited at start"
    sleep 0.1
  done
  [ -s "$tmp/ready" ] || fail "the server did not write its ready file"
  url=$(cat "$tmp/ready")
  case $url in http://127.0.0.1:*[0-9]) url=$url/ ;; *) fail "ready file holds '$url' (the base URL, no slash)" ;; esac
}
stop_server() {
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  pid=
  [ "$rc" -eq 0 ] || fail "the server exited with $rc on SIGTERM"
  if grep -q "ERROR: \(Address\|Undefined\|Leak\)Sanitizer\|runtime error:" "$tmp/server.log"; then
    fail "sanitizer report in the server's log"
  fi
}
gen() { # gen JSON OUTFILE [curl options] -> HTTP status on stdout
  local body=$1 out=$2
  shift 2
  curl -sS -N --max-time 120 -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' -X POST \
    --data-binary "$body" "$@" "${url}api/generate"
}
active() { curl -sS --max-time 10 "${url}api/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["active"])'; }
wait_idle() {
  for _ in $(seq 200); do
    [ "$(active)" = 0 ] && return 0
    sleep 0.05
  done
  fail "$1: the server still runs a generation"
}

# ---------------------------------------------------------------- page and info
start_server --max-generations 2
curl -sS -f "$url" -o "$tmp/index.html" || fail "GET /"
grep -q '<script src="/app.js">' "$tmp/index.html" || fail "the page does not load app.js"
grep -q 'id="tau"' "$tmp/index.html" || fail "the page has no threshold slider"
ct=$(curl -sS -f -o "$tmp/app.js" -w '%{content_type}' "${url}app.js") || fail "GET /app.js"
[[ $ct == text/javascript* ]] || fail "app.js served as $ct"
cmp -s "$tmp/app.js" "$(dirname "$0")/../../src/ui/page/app.js" || fail "app.js differs from src/ui/page/app.js"
ct=$(curl -sS -f -o /dev/null -w '%{content_type}' "${url}app.css") || fail "GET /app.css"
[[ $ct == text/css* ]] || fail "app.css served as $ct"
curl -sS -f "${url}api/info" -o "$tmp/info.json" || fail "GET /api/info"
python3 - "$tmp/info.json" <<'PY' || fail "/api/info"
import json, sys
i = json.load(open(sys.argv[1]))
assert i["slm"] == "stories-student.gguf" and i["llm"] == "stories260K.gguf", i
assert i["modes"] == ["joint", "small_only", "llm_only"] and i["router"] is None, i
assert i["policies"] == ["maxprob", "margin", "entropy"] and i["default_tau"] == 0.5, i
assert i["n_ctx"] > 0 and i["max_generations"] == 2, i
PY
pass "page, assets and /api/info"

# ---------------------------------------------------------------- event streams equal `tokroute generate`
check_stream() { # check_stream EVENTS EXPECTED_TEXT MODE TAU N [network]
  python3 - "$@" <<'PY'
import json, sys
events_file, expected_file, mode, tau, n = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
network = len(sys.argv) > 6 and sys.argv[6] == "network"
raw = open(events_file, encoding="utf-8").read()
assert raw.endswith("\n\n"), "the stream does not end with a blank line"
events = []
for block in raw.split("\n\n"):
    if not block.strip() or block.startswith(":"):
        continue
    lines = block.split("\n")
    assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
    events.append((lines[0][7:], json.loads(lines[1][6:])))
names = [e for e, _ in events]
assert names[0] == "start" and names[-1] == "done", names
assert "error" not in names, events
toks = [d for e, d in events if e == "token"]
done = events[-1][1]
assert len(toks) == n == done["n_tokens"], (len(toks), n, done)
assert [t["i"] for t in toks] == list(range(n))
routed = [t for t in toks if t["source"] == "llm"]
assert done["n_routed"] == len(routed), (done, len(routed))
assert abs(done["routed_pct"] - 100.0 * len(routed) / n) < 0.01, done
for t in toks:
    assert t["source"] in ("slm", "llm") and t["tau"] == tau, t
    if mode == "joint":
        assert 0 <= t["score"] <= 1 and (t["score"] < tau) == (t["source"] == "llm"), t
    if t["source"] == "llm" and mode == "joint":
        assert isinstance(t["slm_id"], int) and isinstance(t["slm_text"], str) and t["llm_ms"] >= 0, t
    elif mode == "llm_only":
        assert t["source"] == "llm" and t["score"] is None and "slm_id" not in t, t
    else:
        assert "slm_id" not in t and t["llm_ms"] == 0, t
if mode == "small_only":
    assert not routed and done["llm_calls"] == 0, done
if mode == "llm_only":
    assert done["llm_calls"] == n, done
if mode == "joint":
    assert routed, "nothing routed at this tau"
    # Each routed token is a call or answered without one (lookahead or a draft walk: hiding the round trip).
    assert done["llm_calls"] + done["lookahead_hits"] == len(routed), done
    assert 0 <= done["draft_hits"] <= done["lookahead_hits"] and done["llm_blocking"] <= done["llm_calls"], done
    if network:  # a remote LLM: hiding is on by default, and the streamed lookahead answers some routed tokens
        assert done["llm_blocking"] < len(routed) and done["lookahead_hits"] > 0, done
    else:
        assert done["llm_calls"] == done["llm_blocking"] == len(routed), done
for k in ("ttft_ms", "mean_tbt_ms", "slm_ms", "llm_ms", "total_ms"):
    assert done[k] >= 0, (k, done)
assert done["mode"] == {"small_only": "slm", "joint": "joint", "llm_only": "llm"}[mode], done
# Bytes are counted by network backends only; each LLM call sends a request and reads an answer.
if network and done["llm_calls"] > 0:
    assert done["bytes_sent"] > 0 and done["bytes_received"] > 0, done
else:
    assert done["bytes_sent"] == 0 and done["bytes_received"] == 0, done
assert done["stop"] in ("length", "eog"), done
text = "".join(d["text"] for e, d in events if e in ("token", "text"))
expected = open(expected_file, encoding="utf-8").read().rstrip("\n")
assert text == expected, (text, expected)
PY
}
prompt="Once upon a time"
"$cli" generate --slm "$slm" -p "$prompt" -n 40 --no-summary >"$tmp/slm.txt"
[ "$(gen '{"prompt":"Once upon a time","mode":"small_only","max_tokens":40}' "$tmp/slm.sse")" = 200 ] || fail "small_only"
check_stream "$tmp/slm.sse" "$tmp/slm.txt" small_only 0.5 40 || fail "small_only stream"
"$cli" generate --slm "$slm" --llm "$llm" --threshold 0.9 -p "$prompt" -n 40 --no-summary >"$tmp/joint.txt"
[ "$(gen '{"prompt":"Once upon a time","mode":"joint","tau":0.9,"max_tokens":40}' "$tmp/joint.sse")" = 200 ] || fail "joint"
check_stream "$tmp/joint.sse" "$tmp/joint.txt" joint 0.9 40 || fail "joint stream"
"$cli" generate --slm "$slm" --llm "$llm" --mode llm -p "$prompt" -n 20 --no-summary >"$tmp/llm.txt"
[ "$(gen '{"prompt":"Once upon a time","mode":"llm_only","max_tokens":20}' "$tmp/llm.sse")" = 200 ] || fail "llm_only"
check_stream "$tmp/llm.sse" "$tmp/llm.txt" llm_only 0.5 20 || fail "llm_only stream"
pass "small_only, joint and llm_only streams match tokroute generate"

# ---------------------------------------------------------------- bad requests: 4xx, a message, still serving
bad() { # bad EXPECTED_STATUS METHOD PATH BODY WHAT
  local code
  code=$(curl -sS --max-time 20 -o "$tmp/bad.json" -w '%{http_code}' -X "$2" -H 'Content-Type: application/json' \
    --data-binary "$4" "${url}${3#/}") || fail "$5: curl failed (server crashed?)"
  [ "$code" = "$1" ] || fail "$5: HTTP $code, expected $1 ($(cat "$tmp/bad.json"))"
  python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert isinstance(e["message"],str) and e["message"] and set(e) == {"message","type","param","code"}, e' "$tmp/bad.json" \
    || fail "$5: no JSON error object in OpenAI's shape"
}
bad 400 POST /api/generate '{"prompt":' "truncated JSON"
bad 400 POST /api/generate '[1,2]' "not an object"
bad 400 POST /api/generate '' "empty body"
bad 400 POST /api/generate '{"mode":"joint"}' "no prompt"
bad 400 POST /api/generate '{"prompt":""}' "empty prompt"
bad 400 POST /api/generate '{"prompt":42}' "prompt not a string"
bad 400 POST /api/generate '{"prompt":"a","mode":"both"}' "unknown mode"
bad 400 POST /api/generate '{"prompt":"a","tau":1.5}' "tau above 1"
bad 400 POST /api/generate '{"prompt":"a","tau":-0.1}' "tau below 0"
bad 400 POST /api/generate '{"prompt":"a","tau":"0.5"}' "tau as a string"
bad 400 POST /api/generate '{"prompt":"a","max_tokens":0}' "max_tokens 0"
bad 400 POST /api/generate '{"prompt":"a","max_tokens":2.5}' "fractional max_tokens"
bad 400 POST /api/generate '{"prompt":"a","max_tokens":1e300}' "huge max_tokens"
bad 400 POST /api/generate '{"prompt":"a","policy":"mlp"}' "mlp as a policy"
bad 400 POST /api/generate '{"prompt":"a","policy":"best"}' "unknown policy"
bad 400 POST /api/generate '{"prompt":"a","chat":true}' "chat without a template"
bad 400 POST /api/generate '{"prompt":"a","chat":"yes"}' "chat not a boolean"
bad 400 POST /api/generate '{"prompt":"Once upon a time","max_tokens":1000}' "context full"
grep -q "context full" "$tmp/bad.json" || fail "context full: message says '$(cat "$tmp/bad.json")'"
bad 400 POST /api/cancel '{"id":"x"}' "cancel without an id"
bad 400 POST /api/cancel 'nonsense' "cancel with bad JSON"
bad 405 GET /api/generate '' "GET /api/generate"
bad 405 PUT / '' "PUT /"
bad 404 GET /nope.js '' "unknown file"
bad 404 GET /../../etc/passwd '' "path outside the page"
bad 404 POST /api/nope '{}' "unknown endpoint"
code=$(curl -sS -o "$tmp/bad.json" -w '%{http_code}' -X POST --data-binary '{"prompt":"a"}' "${url}api/generate")
[ "$code" = 415 ] || fail "a form-encoded POST: HTTP $code, expected 415"
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: text/plain' --data-binary '{"id":1}' "${url}api/cancel")
[ "$code" = 415 ] || fail "a text/plain cancel: HTTP $code, expected 415"
# DNS rebinding: another name for this address is refused; the loopback names (with the port) are served.
port=${url##*:}; port=${port%/}
for h in "evil.example:$port" "evil.example" "127.0.0.1.evil.example:$port" "localhost:80x"; do
  code=$(curl -sS -o "$tmp/bad.json" -w '%{http_code}' -H "Host: $h" "${url}api/info")
  [ "$code" = 403 ] || fail "Host: $h got HTTP $code, expected 403"
  code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Host: $h" -H 'Content-Type: application/json' -X POST \
    --data-binary '{"prompt":"a","mode":"small_only","max_tokens":1}' "${url}api/generate")
  [ "$code" = 403 ] || fail "POST with Host: $h got HTTP $code, expected 403"
done
for h in "localhost:$port" "127.0.0.1:$port" "LOCALHOST" "[::1]:$port"; do
  code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Host: $h" "${url}api/info")
  [ "$code" = 200 ] || fail "Host: $h got HTTP $code, expected 200"
done
head -c 300000 /dev/zero | tr '\0' 'a' >"$tmp/big.txt"
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data-binary @"$tmp/big.txt" "${url}api/generate")
[ "$code" = 413 ] || fail "oversized body: HTTP $code"
[ "$(gen '{"prompt":"Once upon a time","mode":"small_only","max_tokens":40}' "$tmp/again.sse")" = 200 ] || fail "after bad requests"
cmp -s "$tmp/slm.sse" "$tmp/again.sse" || check_stream "$tmp/again.sse" "$tmp/slm.txt" small_only 0.5 40 || fail "after bad requests"
pass "bad requests get 4xx with a message; the server keeps serving"
stop_server

# ---------------------------------------------------------------- cancel, disconnect, concurrency, busy, SIGTERM
# Every token routed (tau 1) with a 20 ms simulated round trip, each waited for (--sync): 400 tokens take 8 s, so
# there is time to stop them.
start_server --max-generations 2 --max-queue 0 --simulate-rtt 20 --sync
long='{"prompt":"Once upon a time","mode":"joint","tau":1,"max_tokens":400}'
gen "$long" "$tmp/cancel.sse" >"$tmp/cancel.code" &
curl_pid=$!
for _ in $(seq 100); do grep -q '"i":3,' "$tmp/cancel.sse" 2>/dev/null && break; sleep 0.05; done
id=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().split("data: ",1)[1].split("\n",1)[0])["id"])' \
  "$tmp/cancel.sse") || fail "no start event"
[ "$(active)" = 1 ] || fail "not running during a generation"
curl -sS -f -X POST -H "Content-Type: application/json" --data-binary "{\"id\":$id}" "${url}api/cancel" | grep -q '"cancelled":true' || fail "cancel by id"
wait "$curl_pid" || fail "the cancelled stream did not end cleanly"
python3 - "$tmp/cancel.sse" <<'PY' || fail "cancelled stream"
import json, sys
blocks = [b for b in open(sys.argv[1]).read().split("\n\n") if b.startswith("event: ")]
last = blocks[-1].split("\n")
assert last[0] == "event: done", last
d = json.loads(last[1][6:])
assert d["stop"] == "cancelled" and 0 < d["n_tokens"] < 400, d
PY
wait_idle "cancel"
curl -sS -X POST -H "Content-Type: application/json" --data-binary '{"id":999}' "${url}api/cancel" | grep -q '"cancelled":false' || fail "cancel of an unknown id"
pass "POST /api/cancel ends the stream with stop=cancelled; the server is idle"

# A client that goes away: curl gives up after 1 s; the server must notice and stop generating.
gen "$long" "$tmp/drop.sse" --max-time 1 >/dev/null 2>&1 || true
grep -q '"i":' "$tmp/drop.sse" || fail "no tokens before the disconnect"
wait_idle "disconnect"
pass "a dropped connection cancels its generation"

# Two at once (the limit), a third gets 429 (no queue), both finish with their own ids. 150 routed tokens at 20 ms
# each: 3 s for the poll below to see both running, even when the second curl starts late on a busy machine.
short='{"prompt":"Once upon a time","mode":"joint","tau":1,"max_tokens":150}'
gen "$short" "$tmp/c1.sse" >"$tmp/c1.code" &
c1=$!
gen "$short" "$tmp/c2.sse" >"$tmp/c2.code" &
c2=$!
for _ in $(seq 200); do [ "$(active)" = 2 ] && break; sleep 0.05; done
[ "$(active)" = 2 ] || fail "two generations are not running at once"
bad 429 POST /api/generate "$short" "a third generation beyond --max-generations 2"
wait "$c1" "$c2"
[ "$(cat "$tmp/c1.code")" = 200 ] && [ "$(cat "$tmp/c2.code")" = 200 ] || fail "concurrent generations"
python3 - "$tmp/c1.sse" "$tmp/c2.sse" <<'PY' || fail "concurrent streams"
import json, sys
texts, ids = [], []
for f in sys.argv[1:]:
    ev = [(b.split("\n")[0][7:], json.loads(b.split("\n")[1][6:])) for b in open(f).read().split("\n\n") if b.startswith("event: ")]
    assert ev[-1][0] == "done" and ev[-1][1]["n_tokens"] == 150 and ev[-1][1]["n_routed"] == 150, ev[-1]
    ids.append(ev[0][1]["id"])
    texts.append("".join(d["text"] for e, d in ev if e in ("token", "text")))
assert ids[0] != ids[1] and texts[0] == texts[1], (ids, texts)
PY
pass "two generations at once give the same text; a third gets 429"

# SIGTERM while a generation runs: the stream ends and the server exits 0.
gen "$long" "$tmp/term.sse" >/dev/null 2>&1 &
c3=$!
for _ in $(seq 100); do grep -q '"i":2,' "$tmp/term.sse" 2>/dev/null && break; sleep 0.05; done
stop_server
wait "$c3" || true
grep -q '"stop":"cancelled"' "$tmp/term.sse" || fail "the stream did not end with a cancelled summary on SIGTERM"
pass "SIGTERM cancels the running generation and exits 0"

# Start-up errors: a busy port, a bad host, a missing model.
timeout 20 "$cli" ui --slm "$slm" --port 0 --host 300.1.1.1 2>"$tmp/err.txt" && fail "bad host accepted"
grep -q "tokroute: " "$tmp/err.txt" || fail "bad host: no message"
timeout 20 "$cli" ui --slm "$tmp/none.gguf" --port 0 2>"$tmp/err.txt" && fail "missing model accepted"
timeout 20 "$cli" ui --slm "$slm" --mode joint 2>"$tmp/err.txt" && fail "unknown option accepted"
grep -q -- "--ready-file" <<<"$("$cli" ui --help)" || fail "--help"
pass "start-up errors"

# ---------------------------------------------------------------- no LLM, a chat template
rm -f "$tmp/ready"
"$cli" ui --slm "$slm" --chat-template chatml --port 0 --ready-file "$tmp/ready" 2>"$tmp/server.log" &
pid=$!
for _ in $(seq 300); do [ -s "$tmp/ready" ] && break; kill -0 "$pid" 2>/dev/null || fail "SLM-only server exited"; sleep 0.1; done
url=$(cat "$tmp/ready")/
curl -sS -f "${url}api/info" | python3 -c '
import json, sys
i = json.load(sys.stdin)
assert i["llm"] is None and i["modes"] == ["small_only"] and i["chat_template"] == "chatml", i' || fail "SLM-only /api/info"
[ "$(gen '{"prompt":"Tell a story","chat":true,"max_tokens":8}' "$tmp/chat.sse")" = 200 ] || fail "chat generation"
grep -q '^event: done' "$tmp/chat.sse" || fail "chat generation: no summary"
python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().split("data: ",1)[1].split("\n",1)[0]); assert d["n_prompt"] > 10, d' \
  "$tmp/chat.sse" || fail "the chat template was not applied to the prompt"
bad 400 POST /api/generate '{"prompt":"a","mode":"joint"}' "joint without an LLM"
grep -q "no LLM" "$tmp/bad.json" || fail "joint without an LLM: $(cat "$tmp/bad.json")"
stop_server
pass "without an LLM: small_only only; the chat template applies"

# ---------------------------------------------------------------- a live LLM server (`tokroute serve`)
rm -f "$tmp/llm.ready"
"$cli" serve -m "$llm" --port 0 --ready-file "$tmp/llm.ready" -t 1 2>"$tmp/llm-server.log" &
llm_pid=$!
for _ in $(seq 300); do [ -s "$tmp/llm.ready" ] && break; kill -0 "$llm_pid" 2>/dev/null || fail "tokroute serve exited"; sleep 0.1; done
rm -f "$tmp/ready"
"$cli" ui --slm "$slm" --server "$(cat "$tmp/llm.ready")" --port 0 --ready-file "$tmp/ready" 2>"$tmp/server.log" &
pid=$!
for _ in $(seq 300); do [ -s "$tmp/ready" ] && break; kill -0 "$pid" 2>/dev/null || fail "ui --server exited"; sleep 0.1; done
url=$(cat "$tmp/ready")/
[ "$(gen '{"prompt":"Once upon a time","mode":"joint","tau":0.9,"max_tokens":40}' "$tmp/net.sse")" = 200 ] || fail "joint via server"
check_stream "$tmp/net.sse" "$tmp/joint.txt" joint 0.9 40 network || fail "joint stream via tokroute serve"
stop_server
kill -TERM "$llm_pid"; wait "$llm_pid" || fail "tokroute serve exited badly on SIGTERM"
llm_pid=
pass "joint through tokroute serve: the embedded run's text, bytes sent and received counted, fewer blocking calls than routed tokens"

# ---------------------------------------------------------------- a dead LLM server
# A port where nothing listens. joint: a warning event, routed tokens fall back to the SLM's (source "fallback"),
# counted in the summary; llm_only has no SLM proposal to fall back on: an error event names the failure.
dead_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
rm -f "$tmp/ready"
"$cli" ui --slm "$slm" --server "http://127.0.0.1:$dead_port" --timeout-ms 500 --retries 0 --port 0 \
  --ready-file "$tmp/ready" 2>"$tmp/server.log" &
pid=$!
for _ in $(seq 300); do [ -s "$tmp/ready" ] && break; kill -0 "$pid" 2>/dev/null || fail "dead-LLM server exited"; sleep 0.1; done
url=$(cat "$tmp/ready")/
"$cli" generate --slm "$slm" -p "$prompt" -n 40 --no-summary >"$tmp/slm40.txt"
[ "$(gen '{"prompt":"Once upon a time","mode":"joint","tau":0.9,"max_tokens":40}' "$tmp/dead.sse")" = 200 ] || fail "dead LLM joint"
python3 - "$tmp/dead.sse" "$tmp/slm40.txt" <<'PY' || fail "dead LLM stream"
import json, sys
ev = [(b.split("\n")[0][7:], json.loads(b.split("\n")[1][6:])) for b in open(sys.argv[1]).read().split("\n\n") if b.startswith("event: ")]
names = [e for e, _ in ev]
assert names.count("warning") == 1 and "error" not in names and names[-1] == "done", names
warning = [d for e, d in ev if e == "warning"][0]["message"]
assert "unavailable" in warning, warning
toks = [d for e, d in ev if e == "token"]
fallback = [t for t in toks if t["source"] == "fallback"]
assert len(toks) == 40 and fallback and not [t for t in toks if t["source"] == "llm"], names
assert all(t["score"] < t["tau"] for t in fallback)
done = ev[-1][1]
assert done["n_fallback"] == len(fallback) and done["n_routed"] == 0, done
text = "".join(d["text"] for e, d in ev if e in ("token", "text"))
assert text == open(sys.argv[2]).read().rstrip("\n"), "fallback text differs from the SLM alone"
PY
[ "$(gen '{"prompt":"Once upon a time","mode":"llm_only","max_tokens":5}' "$tmp/dead-llm.sse")" = 200 ] || fail "dead LLM llm_only"
grep -q '^event: error' "$tmp/dead-llm.sse" || fail "llm_only with a dead LLM: no error event"
[ "$(active)" = 0 ] || fail "dead LLM: generations left running"
stop_server
pass "dead LLM: joint falls back to the SLM with a warning; llm_only reports an error"
