#!/usr/bin/env bash
# route.sh — `tokroute generate` with two models, as a user runs it: stdout carries only the generated text,
# the JSONL trace has the documented keys, LLM tokens are red only on a terminal, the summary goes to stderr,
# --simulate-rtt delays each LLM call, and bad router files or mismatched models fail with a clear message.
set -euo pipefail
cli=$1
shared=$2
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Routed run with a trace.
"$cli" generate --slm "$slm" --llm "$llm" --policy maxprob --threshold 0.5 -p "Once upon a time" -n 40 \
  --trace "$tmp/trace.jsonl" >"$tmp/out.txt" 2>"$tmp/err.txt"
grep -q "routed to the LLM" "$tmp/err.txt" || fail "no summary on stderr"
grep -q "time to first token" "$tmp/err.txt" || fail "summary lacks time to first token"
! grep -q $'\x1b' "$tmp/out.txt" || fail "ANSI colors written to a pipe"
! grep -q "Once upon a time" "$tmp/out.txt" || fail "prompt echoed without --echo"
python3 - "$tmp/trace.jsonl" "$tmp/out.txt" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 40, len(rows)
keys = {"index", "id", "text", "source", "score", "tau", "slm_ms", "llm_ms"}
routed = 0
for i, r in enumerate(rows):
    assert keys <= set(r), r
    assert r["index"] == i and r["source"] in ("slm", "llm") and r["tau"] == 0.5
    assert 0.0 <= r["score"] <= 1.0
    assert (r["score"] < r["tau"]) == (r["source"] == "llm"), r
    if r["source"] == "llm":
        routed += 1
        assert "slm_id" in r and isinstance(r["slm_id"], int)
    else:
        assert "slm_id" not in r and r["llm_ms"] == 0
assert 0 < routed < 40, routed
text = "".join(r["text"] for r in rows)
out = open(sys.argv[2]).read()
assert out.rstrip("\n") == text, (out, text)
PY

# Summary as JSON; --simulate-rtt adds its delay to every routed token (--sync: the synchronous loop's accounting;
# the speculative loop's is checked in hide.sh).
"$cli" generate --slm "$slm" --llm "$llm" --threshold 0.5 -p "Once upon a time" -n 24 --simulate-rtt 40 --sync \
  --trace "$tmp/rtt.jsonl" --summary-json >/dev/null 2>"$tmp/sum.json"
python3 - "$tmp/rtt.jsonl" "$tmp/sum.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
s = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
routed = [r for r in rows if r["source"] == "llm"]
assert routed and all(r["llm_ms"] >= 40 for r in routed)
assert s["n_routed"] == len(routed) and s["n_tokens"] == len(rows)
assert s["llm_ms"] >= 40 * len(routed)
assert s["slm_evaluated"] == s["n_prompt"] + s["n_tokens"] - 1
assert s["llm_evaluated"] <= s["n_prompt"] + s["n_tokens"]
PY

# Colors on a terminal (script gives the command a pseudo-terminal), none with --no-color.
command -v script >/dev/null || fail "the 'script' command (Debian bsdutils, see scripts/deps.sh) is needed"
script -qec "$cli generate --slm $slm --llm $llm --threshold 0.6 -p 'Once upon a time' -n 30 --no-summary" /dev/null >"$tmp/tty.txt"
grep -q $'\x1b\[31m' "$tmp/tty.txt" || fail "no red LLM tokens on a terminal"
script -qec "$cli generate --slm $slm --llm $llm --threshold 0.6 -p 'Once upon a time' -n 30 --no-summary --no-color" /dev/null >"$tmp/tty2.txt"
! grep -q $'\x1b\[31m' "$tmp/tty2.txt" || fail "--no-color still colors"

# Modes: slm equals the student alone, llm equals stories260K alone.
a=$("$cli" generate -m "$slm" -p "Tom and his dog" -n 30 --no-summary)
b=$("$cli" generate --slm "$slm" --llm "$llm" --mode slm -p "Tom and his dog" -n 30 --no-summary)
[ "$a" = "$b" ] || fail "mode slm differs from the SLM alone"
a=$("$cli" generate -m "$llm" -p "Tom and his dog" -n 30 --no-summary)
b=$("$cli" generate --slm "$slm" --llm "$llm" --mode llm -p "Tom and his dog" -n 30 --no-summary)
[ "$a" = "$b" ] || fail "mode llm differs from the LLM alone"

# --echo prints the prompt first; --stop ends before the stop string.
out=$("$cli" generate -m "$llm" -p "Once upon a time" -n 40 --echo --no-summary)
[[ "$out" == "Once upon a time, there was a little girl named Lily."* ]] || fail "--echo: $out"
out=$("$cli" generate -m "$llm" -p "Once upon a time" -n 40 --stop "Lily" --no-summary)
[ "$out" = ", there was a little girl named " ] || fail "--stop: '$out'"

# A forced chat template renders and generates.
"$cli" generate -m "$llm" -p "hello" --chat-template chatml -n 5 --no-summary >/dev/null || fail "--chat-template chatml"

# Errors: a model passed as a router, a missing LLM, a mode without its model.
if "$cli" generate --slm "$slm" --llm "$llm" --router "$llm" -p hi -n 3 >"$tmp/o" 2>"$tmp/e"; then fail "model accepted as router"; fi
grep -q "tokroute:" "$tmp/e" && [ ! -s "$tmp/o" ] || fail "router error not reported cleanly"
if "$cli" generate --slm "$slm" --llm "$tmp/missing.gguf" -p hi -n 3 2>"$tmp/e" >/dev/null; then fail "missing LLM accepted"; fi
grep -q "missing.gguf" "$tmp/e" || fail "missing LLM not named"
if "$cli" generate --slm "$slm" --mode llm -p hi -n 3 2>"$tmp/e" >/dev/null; then fail "llm mode without --llm"; fi
# Errors found after generation started leave stdout empty; each failure is one clear line on stderr.
if "$cli" generate -m "$llm" -p "Once upon a time" -n 100000 >"$tmp/o" 2>"$tmp/e"; then fail "context overflow accepted"; fi
[ ! -s "$tmp/o" ] || fail "stdout not empty after an error: '$(cat "$tmp/o")'"
grep -q "exceed the SLM context" "$tmp/e" || fail "context overflow not explained"
if "$cli" generate -m "$llm" -p hi --chat -n 3 >"$tmp/o" 2>"$tmp/e"; then fail "--chat without a template accepted"; fi
[ "$(wc -l <"$tmp/e")" -eq 1 ] && grep -q "chat template" "$tmp/e" || fail "--chat error: $(cat "$tmp/e")"
# --sync with a hiding setting is a usage error (exit 2, one message), for generate and ui alike.
for cmd in "generate -p hi" ui; do
  rc=0
  # shellcheck disable=SC2086
  "$cli" $cmd --slm "$slm" --llm "$llm" --sync --lookahead 2 >"$tmp/o" 2>"$tmp/e" || rc=$?
  [ "$rc" -eq 2 ] && grep -q "give it alone" "$tmp/e" || fail "$cmd --sync --lookahead: rc $rc: $(cat "$tmp/e")"
done
# The README's API example builds beside the CLI and routes.
example=$(dirname "$cli")/example_route
out=$("$example" "$slm" "$llm")
[[ "$out" == ", there was a little girl named Lily."* ]] || fail "example_route: $out"
echo "$out" | grep -Eq '^64 tokens, [0-9]+ routed$' || fail "example_route summary: $out"
# ... and checks every status: a missing model is one error line and exit status 1.
if "$example" "$slm" "$tmp/missing.gguf" >/dev/null 2>"$tmp/e"; then fail "example_route ignored a missing model"; fi
grep -q "missing.gguf" "$tmp/e" || fail "example_route error: $(cat "$tmp/e")"
echo "route e2e: all checks passed"
