#!/usr/bin/env bash
# serve_openai.sh — `tokroute serve` as an OpenAI server for apps: the official openai SDK
# (tests/ui/serve_openai.test.mjs) against a real `serve --api-key K --chat-template chatml --cors ORIGIN` process:
# chat and completions, streamed and not, errors as the SDK's classes; then, from the outside: the stream the SDK
# aborted left exactly one tidy log line and none of libmicrohttpd's; a browser preflight from the allowed origin is
# answered and one from another origin is not; the demo model without --chat-template answers chat with a 400 that
# says what to do; a bad --chat-template or --cors is refused at start. The npm packages come from scripts/deps.sh
# (make's set-up); when missing they are installed here (npm ci) rather than skipped.
set -euo pipefail
cli=$(realpath "$1")
shared=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
llm="$shared/models/stories260K.gguf"
. "$root/tests/support/e2e.sh"
if [ ! -f "$root/tests/ui/node_modules/openai/package.json" ]; then
  (cd "$root/tests/ui" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

start_serve "$(free_port)" --api-key sdk-key --chat-template chatml --cors http://app.test -t 1 -c 512
grep -q "chat template chatml, CORS on" "$tmp/serve.log" || fail "the start line does not name the template and CORS"
node "$root/tests/ui/serve_openai.test.mjs" "$url" sdk-key || { tail -20 "$tmp/serve.log" >&2; fail "SDK test"; }

# The aborted stream: one line in our words (it comes once the server next writes to the closed connection).
for _ in $(seq 1 100); do grep -q "client went away" "$tmp/serve.log" && break; sleep 0.05; done
n=$(grep -c "chat_completions: client went away during completion chatcmpl-" "$tmp/serve.log" || true)
[ "$n" = 1 ] || { cat "$tmp/serve.log" >&2; fail "expected one 'client went away' line, found $n"; }
if grep -q "Failed to send\|forcibly closed" "$tmp/serve.log"; then
  cat "$tmp/serve.log" >&2
  fail "libmicrohttpd's own message reached the log"
fi
echo "abort log ok: $(grep "client went away" "$tmp/serve.log" | cut -c22-)"

# CORS from the outside: the preflight needs no key; another origin gets no Allow-Origin.
pre=$(curl -s -i -X OPTIONS "$url/v1/chat/completions" -H "Origin: http://app.test" \
  -H "Access-Control-Request-Method: POST" -H "Access-Control-Request-Headers: authorization, content-type")
echo "$pre" | grep -qi "^HTTP/1.1 204" || fail "preflight: $pre"
echo "$pre" | grep -qi "^Access-Control-Allow-Origin: http://app.test" || fail "preflight Allow-Origin: $pre"
echo "$pre" | grep -qi "^Access-Control-Allow-Headers: .*Authorization" || fail "preflight Allow-Headers: $pre"
other=$(curl -s -i -X OPTIONS "$url/v1/chat/completions" -H "Origin: http://other.test")
echo "$other" | grep -qi "^HTTP/1.1 403" || fail "another origin's preflight: $other"
echo "$other" | grep -qi "Access-Control-Allow-Origin" && fail "another origin got Allow-Origin: $other"
echo "cors ok"
stop_pid "$server_pid"

# The demo model has no chat template: without --chat-template a chat request is a clear 400; no CORS: OPTIONS 405.
: >"$tmp/serve.log"
start_serve "$(free_port)" -t 1
body=$(curl -H 'Content-Type: application/json' -s -w ' %{http_code}' "$url/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi"}]}')
[[ "$body" == *' 400' && "$body" == *'"code":"no_chat_template"'* && "$body" == *--chat-template* ]] ||
  fail "chat without a template: $body"
opt=$(curl -s -i -X OPTIONS "$url/v1/chat/completions" -H "Origin: http://app.test")
echo "$opt" | grep -qi "^HTTP/1.1 405" || fail "OPTIONS without --cors: $opt"
echo "$opt" | grep -qi "^Allow: POST" || fail "OPTIONS without --cors, Allow: $opt"
echo "$opt" | grep -qi "Access-Control" && fail "CORS headers without --cors: $opt"
stop_pid "$server_pid"

# Refused at start.
set +e
err=$("$cli" serve -m "$llm" --chat-template alpaca 2>&1); rc=$?
[ $rc -ne 0 ] && [[ "$err" == *"unknown chat template 'alpaca'"* ]] || fail "--chat-template alpaca: rc $rc: $err"
err=$("$cli" serve -m "$llm" --port 0 --cors localhost:3000 2>&1); rc=$?
[ $rc -ne 0 ] && [[ "$err" == *"needs its scheme"* ]] || fail "--cors localhost:3000: rc $rc: $err"
set -e
echo "serve_openai ok"
