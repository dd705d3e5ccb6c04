#!/usr/bin/env bash
# ui_openai.sh — the device's OpenAI-compatible API (`tokroute ui` /v1) with the official `openai` SDK
# (tests/ui/openai.test.mjs): the demo pair with --chat-template chatml, a key, one generation at a time and one
# waiting (--max-queue 1), a 10 ms simulated round trip (--sync) so a long generation lasts long enough to fill
# the queue. The expected text and routed count come from `tokroute generate --summary-json` with the same prompt,
# router settings and token count (without the simulated delay: routing does not depend on timing). Then the key
# from TOKROUTE_UI_KEY, and a server bound beyond loopback without a key refused at start. The npm packages come
# from scripts/deps.sh; when they are missing this installs them (npm ci) rather than skip.
set -euo pipefail
cli=$(realpath "$1")
shared=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tests/support/e2e.sh"
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
if [ ! -f "$root/tests/ui/node_modules/openai/package.json" ]; then
  (cd "$root/tests/ui" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

prompt="Once upon a time"
threshold=0.9
n=40
"$cli" generate --slm "$slm" --llm "$llm" --policy maxprob --threshold "$threshold" -p "$prompt" -n "$n" \
  --summary-json >"$tmp/gen.txt" 2>"$tmp/gen.err" || { cat "$tmp/gen.err" >&2; fail "tokroute generate"; }
python3 - "$tmp/gen.txt" "$tmp/gen.err" "$tmp/expected.json" "$prompt" "$threshold" "$n" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
assert text.endswith("\n"), repr(text)
summary = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")][-1]
assert summary["n_tokens"] == int(sys.argv[6]), summary
json.dump({"prompt": sys.argv[4], "threshold": float(sys.argv[5]), "n": int(sys.argv[6]), "text": text[:-1],
           "n_routed": summary["n_routed"], "model": "stories-student.gguf"}, open(sys.argv[3], "w"))
PY

start_ui() { # start_ui [args...]: sets $url and $ui_pid
  rm -f "$tmp/ready"
  timeout 600 "$cli" ui --slm "$slm" --llm "$llm" --chat-template chatml --port 0 --ready-file "$tmp/ready" "$@" \
    2>>"$tmp/ui.log" &
  ui_pid=$!
  pids+=("$ui_pid")
  for _ in $(seq 300); do
    [ -s "$tmp/ready" ] && { url=$(cat "$tmp/ready"); return 0; }
    kill -0 "$ui_pid" 2>/dev/null || { cat "$tmp/ui.log" >&2; fail "tokroute ui exited at start"; }
    sleep 0.1
  done
  fail "tokroute ui did not come up"
}

key=k-$RANDOM$RANDOM
start_ui --ui-key "$key" --max-queue 1 --simulate-rtt 10 --sync
node "$root/tests/ui/openai.test.mjs" "$url" "$key" "$tmp/expected.json" || { cat "$tmp/ui.log" >&2; fail "openai.test.mjs"; }
stop_pid "$ui_pid"
if grep -q "ERROR: \(Address\|Undefined\|Leak\)Sanitizer\|runtime error:" "$tmp/ui.log"; then
  cat "$tmp/ui.log" >&2
  fail "sanitizer report in the server's log"
fi

# The key from the environment; without it a request is 401.
TOKROUTE_UI_KEY=$key start_ui
code=$(curl -sS -o "$tmp/r.json" -w '%{http_code}' "$url/v1/models")
[ "$code" = 401 ] || fail "no key: HTTP $code"
code=$(curl -sS -o "$tmp/r.json" -w '%{http_code}' -H "Authorization: bearer $key" "$url/v1/models")
[ "$code" = 200 ] || fail "TOKROUTE_UI_KEY: HTTP $code"
stop_pid "$ui_pid"
echo "ok   the key from TOKROUTE_UI_KEY"

# Beyond loopback the key is required: refused at start with a message naming the flag.
if timeout 20 env -u TOKROUTE_UI_KEY "$cli" ui --slm "$slm" --host 0.0.0.0 --port 0 2>"$tmp/err.txt"; then
  fail "--host 0.0.0.0 without a key started"
fi
grep -q -- "--ui-key" "$tmp/err.txt" || fail "no key off loopback: '$(cat "$tmp/err.txt")'"
echo "ok   --host 0.0.0.0 without a key is refused"
