#!/usr/bin/env bash
# cli.sh — the command line's edges a new user meets (issue 24): options that cannot apply refused instead of
# ignored, values that would silently mean something else refused (--threshold nan, --temp -1), a warning for -c
# beyond the trained context, `serve` and `ui` agreeing on --host names and on the ready file, and `make demo`
# needing no npm. Each check runs the real binary; seconds in all.
set -euo pipefail
cli=$1
shared=$2
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# refused CMD... -- PATTERN: exits 2 (a usage error), prints nothing on stdout, and says PATTERN on stderr.
refused() {
  local args=() pattern rc=0
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  pattern=$2
  "$cli" "${args[@]}" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" = 2 ] || fail "exit $rc (not 2) for: ${args[*]}: $(cat "$tmp/err")"
  [ ! -s "$tmp/out" ] || fail "stdout not empty for: ${args[*]}"
  grep -q -- "$pattern" "$tmp/err" || fail "no '$pattern' for: ${args[*]}: $(cat "$tmp/err")"
}

# ---------------------------------------------------------------- options that cannot apply
one=(generate -m "$slm" -p "Once upon a time" -n 4)
refused "${one[@]}" --router README.md -- "--router applies to routed generation: give an LLM"
refused "${one[@]}" --policy bogus -- "--policy applies to routed generation"
refused "${one[@]}" --threshold 0.5 -- "--threshold applies to routed generation"
refused "${one[@]}" --policy maxprob -- "--policy applies to routed generation"
pair=(generate --slm "$slm" --llm "$llm" -p "Once upon a time" -n 4)
refused "${pair[@]}" --mode slm --threshold 0.5 -- "mode slm routes nothing"
refused "${pair[@]}" --mode llm --policy margin -- "mode llm routes nothing"
refused "${pair[@]}" --policy bogus -- "unknown --policy 'bogus'"
refused "${pair[@]}" --policy mlp -- "a trained router: --router FILE"
# Scores are in [0, 1], and so is tau wherever else it is taken (the ui's API, train-router, router files).
for t in nan NaN inf -inf 1.5 2 -0.1; do refused "${pair[@]}" --threshold "$t" -- "--threshold must be in"; done
refused collect --slm "$slm" --llm "$llm" --tau 1.5 -- "--tau must be in"
# A cap below the target could never let the target be reached.
refused "${pair[@]}" --target-routed 0.2 --max-routed 0.1 -- "--max-routed is below --target-routed"
refused "${one[@]}" --temp -1 -- "--temp must be >= 0"
refused "${one[@]}" --temp nan -- "--temp must be >= 0"
# A router file that is not one fails at load, naming the file's problem (exit 1, not ignored).
if "$cli" "${pair[@]}" --router "$root/README.md" >/dev/null 2>"$tmp/err"; then fail "README.md accepted as a router"; fi
[ -s "$tmp/err" ] || fail "no message for a bad router file"
# What stays allowed: the pair with each policy and a threshold; one model with sampling; --temp 0 is greedy.
"$cli" "${pair[@]}" --policy margin --threshold 0.4 --no-summary >/dev/null || fail "routed generation refused"
a=$("$cli" "${one[@]}" --temp 0 --no-summary) && b=$("$cli" "${one[@]}" --no-summary) || fail "single model"
[ "$a" = "$b" ] || fail "--temp 0 is not greedy"
"$cli" "${one[@]}" --temp 0.8 --seed 3 --no-summary >/dev/null || fail "--temp 0.8 refused"
echo "ok: options that cannot apply or would mean something else are refused"

# ---------------------------------------------------------------- sampling without --seed: a fresh draw, reported
# (it was seed 0x5eed every run, so `--temp 1` gave the same text each time). 64 tokens at temperature 1 on the
# demo model: two draws agreeing on all of them is negligible.
samp=(generate -m "$llm" -p "Once upon a time" -n 64 --temp 1 --no-summary)
a=$("$cli" "${samp[@]}" 2>"$tmp/err_a") && b=$("$cli" "${samp[@]}" 2>"$tmp/err_b") || fail "unseeded sampling"
[ "$a" != "$b" ] || fail "two unseeded runs at --temp 1 gave the same text: $a"
seed_a=$(sed -n 's/^tokroute: seed \([0-9]*\) (drawn; --seed [0-9]* replays this run)$/\1/p' "$tmp/err_a")
seed_b=$(sed -n 's/^tokroute: seed \([0-9]*\) .*/\1/p' "$tmp/err_b")
[ -n "$seed_a" ] && [ -n "$seed_b" ] && [ "$seed_a" != "$seed_b" ] || fail "no drawn seed reported: $(cat "$tmp/err_a")"
replay=$("$cli" "${samp[@]}" --seed "$seed_a" 2>"$tmp/err") || fail "--seed $seed_a"
[ "$replay" = "$a" ] || fail "--seed $seed_a does not replay the run"
! grep -q "drawn" "$tmp/err" || fail "a seed drawn although --seed was given"
c=$("$cli" "${samp[@]}" --seed 3) && d=$("$cli" "${samp[@]}" --seed 3) || fail "seeded sampling"
[ "$c" = "$d" ] || fail "--seed 3 does not repeat"
"$cli" generate -m "$llm" -p "Once" -n 4 --temp 1 --seed 3 --summary-json 2>&1 >/dev/null | grep -q '"seed":3,' || fail "no seed in --summary-json"
"$cli" generate --help | grep -q "fresh" || fail "--help does not say an unseeded run draws a fresh seed"
echo "ok: sampling without --seed draws a fresh seed and reports it; --seed replays"

# The summary names the tau a target used (not the one it started from), and "off" for a budget part not given.
"$cli" "${pair[@]}" -n 40 --target-routed 0.2 >/dev/null 2>"$tmp/err" || fail "--target-routed"
grep -q -- "--- budget: target 20.0%, cap off; decided routed" "$tmp/err" || fail "budget line: $(cat "$tmp/err")"
grep -q -- "--- joint mode, tau moved by the target from 0.5: mean [0-9.]*, last [0-9.]* ---" "$tmp/err" ||
  fail "a target's summary shows the starting tau as the one used: $(cat "$tmp/err")"
"$cli" "${pair[@]}" -n 40 --max-routed 0.1 >/dev/null 2>"$tmp/err" || fail "--max-routed"
grep -q -- "--- budget: target off, cap 10.0%; decided routed" "$tmp/err" || fail "cap-only line: $(cat "$tmp/err")"
grep -q -- "--- joint mode, tau 0.5 ---" "$tmp/err" || fail "a cap alone keeps tau: $(cat "$tmp/err")"
echo "ok: the budget's summary"

# ---------------------------------------------------------------- -c beyond the trained context (512 tokens)
"$cli" generate -m "$slm" -p "Once upon a time" -n 4 -c 2048 --no-summary >/dev/null 2>"$tmp/err" || fail "-c 2048"
grep -q "warning: -c 2048 is beyond the 512 tokens the model was trained on" "$tmp/err" || fail "no -c warning: $(cat "$tmp/err")"
"$cli" generate -m "$slm" -p "Once upon a time" -n 4 -c 512 --no-summary >/dev/null 2>"$tmp/err" || fail "-c 512"
! grep -q "warning" "$tmp/err" || fail "warning at -c 512: $(cat "$tmp/err")"
"$cli" logits -m "$slm" --tokens 1,2,3 -c 4096 --logits "$tmp/l.f32" >/dev/null 2>"$tmp/err" || fail "logits -c 4096"
grep -q "warning: -c 4096 is beyond" "$tmp/err" || fail "no -c warning from logits"
echo "ok: -c beyond the trained context is warned about"

# ---------------------------------------------------------------- serve and ui: --host names, the ready file
# wait_ready FILE PID: the file's content once written (the process must stay up meanwhile).
wait_ready() {
  for _ in $(seq 300); do
    [ -s "$1" ] && { cat "$1"; return 0; }
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
"$cli" serve -m "$llm" --host localhost --port 0 --ready-file "$tmp/serve.ready" -t 1 --quiet 2>"$tmp/serve.log" &
pids+=($!)
serve_url=$(wait_ready "$tmp/serve.ready" "${pids[-1]}") || fail "serve --host localhost: $(cat "$tmp/serve.log")"
"$cli" ui --slm "$slm" --host localhost --port 0 --ready-file "$tmp/ui.ready" 2>"$tmp/ui.log" &
pids+=($!)
ui_url=$(wait_ready "$tmp/ui.ready" "${pids[-1]}") || fail "ui --host localhost: $(cat "$tmp/ui.log")"
for u in "$serve_url" "$ui_url"; do
  case $u in http://localhost:*[0-9]) ;; *) fail "ready file holds '$u' (want http://localhost:PORT, no slash)" ;; esac
done
curl -sS -f "$serve_url/health" | grep -q '"ok"' || fail "serve: \$(cat ready)/health"
curl -sS -f "$ui_url/api/info" | grep -q '"slm"' || fail "ui: \$(cat ready)/api/info"
# A port in use is said in words, once, not as libmicrohttpd's own log line; both commands fail.
busy=${serve_url##*:}
if "$cli" serve -m "$llm" --host localhost --port "$busy" -t 1 2>"$tmp/err"; then fail "serve on a busy port"; fi
grep -q "port $busy on localhost is in use" "$tmp/err" && ! grep -qi "bind\|Failed" "$tmp/err" ||
  fail "serve on a busy port says: $(cat "$tmp/err")"
if "$cli" ui --slm "$slm" --host localhost --port "$busy" 2>"$tmp/err"; then fail "ui on a busy port"; fi
grep -q "port $busy on localhost is in use" "$tmp/err" && ! grep -qi "bind\|Failed" "$tmp/err" ||
  fail "ui on a busy port says: $(cat "$tmp/err")"
kill -TERM "${pids[@]}"
wait "${pids[@]}" || fail "a server exited badly on SIGTERM"
pids=()
[ ! -e "$tmp/serve.ready" ] && [ ! -e "$tmp/ui.ready" ] || fail "a ready file outlived its server"
if "$cli" serve -m "$llm" --host no-such-host.invalid --port 0 2>"$tmp/err"; then fail "serve on a bad host name"; fi
grep -q "cannot use host 'no-such-host.invalid'" "$tmp/err" || fail "bad host message: $(cat "$tmp/err")"
echo "ok: serve and ui take --host localhost, write the same ready file and say when a port is in use"

# ---------------------------------------------------------------- make demo needs no npm
# deps.sh for the build and the demo never runs npm (a stub that records calls stands in for it).
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "$@" >>"%s/npm.calls"\nexit 1\n' "$tmp" >"$tmp/bin/npm"
chmod +x "$tmp/bin/npm"
PATH="$tmp/bin:$PATH" bash "$root/scripts/deps.sh" build >/dev/null 2>&1 || true
[ ! -e "$tmp/npm.calls" ] || fail "deps.sh build ran npm: $(cat "$tmp/npm.calls")"
make -s -n -C "$root" demo >"$tmp/demo.plan" 2>&1 || fail "make -n demo: $(cat "$tmp/demo.plan")"
grep -q "deps.sh build" "$tmp/demo.plan" || fail "make demo does not use deps.sh build: $(cat "$tmp/demo.plan")"
! grep -q "npm\|deps.sh test" "$tmp/demo.plan" || fail "make demo would run npm: $(cat "$tmp/demo.plan")"
make -s -n -C "$root" test-fast >"$tmp/test.plan" 2>&1 || true
grep -q "deps.sh test" "$tmp/test.plan" || fail "make test no longer installs the test tools"
echo "ok: make demo needs no npm"

# ---------------------------------------------------------------- train-router and calibrate
stories=$shared/data/tinystories/tinystories_val.txt
"$cli" collect --slm "$slm" --llm "$llm" --data "$stories" --format text --range 0:40 --max-tokens 64 \
  --out "$tmp/train" -t 1 2>/dev/null || fail "collect"
"$cli" collect --slm "$slm" --llm "$llm" --data "$stories" --format text --range 800:820 --max-tokens 64 \
  --out "$tmp/eval" -t 1 2>/dev/null || fail "collect eval"
# The output is checked before any work: no epoch runs.
if "$cli" train-router --data "$tmp/train" --out /nonexistent/r.gguf -t 1 2>"$tmp/err"; then fail "unwritable --out"; fi
grep -q "cannot write the router file /nonexistent/r.gguf" "$tmp/err" || fail "--out message: $(cat "$tmp/err")"
! grep -q "^epoch" "$tmp/err" || fail "trained before finding --out unwritable"
refused train-router --data "$tmp/train" --out "$tmp/r.gguf" --target-routed 0.1 -- "give --eval-data DIR"
refused train-router --data "$tmp/train" --out "$tmp/r.gguf" --eval-data "$tmp/eval" --tau 0.3 --target-routed 0.1 \
  -- "give --tau or --target-routed"
# --eval-data stores the τ that routes --target-routed of the held-out positions: calibrate agrees, and generate
# without --threshold uses it.
"$cli" train-router --data "$tmp/train" --out "$tmp/r.gguf" --hidden 16 --epochs 3 --eval-data "$tmp/eval" \
  --target-routed 0.15 --features maxprob,entropy,margin,topk,token_embedding --slm "$slm" -t 1 --json \
  >"$tmp/train.json" 2>/dev/null || fail "train-router --eval-data"
# A token-embedding router reads the SLM that collect recorded in the data; where that file is gone, calibrate and
# train-router name the flag (not a library function) and the features that do without it.
cp "$slm" "$tmp/slm-gone.gguf"
"$cli" collect --slm "$tmp/slm-gone.gguf" --llm "$llm" --data "$stories" --format text --range 800:805 --max-tokens 32 \
  --out "$tmp/eval-gone" -t 1 2>/dev/null || fail "collect with a copy of the SLM"
rm "$tmp/slm-gone.gguf"
refused calibrate --router "$tmp/r.gguf" --data "$tmp/eval-gone" --target-routed 0.15 -- "is not there: give --slm SLM.gguf"
grep -q "tr_router_set_slm" "$tmp/err" && fail "calibrate names a library function: $(cat "$tmp/err")"
refused train-router --data "$tmp/eval-gone" --out "$tmp/x.gguf" -- "give --slm SLM.gguf, or --features maxprob,entropy,margin,topk"
"$cli" calibrate --router "$tmp/r.gguf" --data "$tmp/eval" --target-routed 0.15 >/dev/null 2>"$tmp/err" \
  || fail "calibrate with the SLM collect recorded: $(cat "$tmp/err")"
grep -q "from $(realpath "$slm") (recorded by collect" "$tmp/err" || fail "calibrate does not say which SLM: $(cat "$tmp/err")"
tau=$("$cli" calibrate --router "$tmp/r.gguf" --slm "$slm" --data "$tmp/eval" --target-routed 0.15 2>/dev/null)
python3 - "$tmp/train.json" "$tau" <<'PY' || fail "stored tau"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["target_routed"] == 0.15 and abs(s["routed"] - 0.15) < 0.01, s
assert abs(s["tau"] - float(sys.argv[2])) < 1e-6, (s["tau"], sys.argv[2])
PY
"$cli" generate --slm "$slm" --llm "$llm" --router "$tmp/r.gguf" -p "Once upon a time" -n 8 --summary-json \
  2>"$tmp/err" >/dev/null || fail "generate with the calibrated router"
grep -q "\"tau\":$(python3 -c "print('%g' % float('$tau'))")," "$tmp/err" || fail "generate does not use the stored tau: $(cat "$tmp/err")"
# Without --eval-data the file keeps --tau (default 0.5).
"$cli" train-router --data "$tmp/train" --out "$tmp/plain.gguf" --hidden 8 --epochs 1 -t 1 --json 2>/dev/null \
  | python3 -c 'import json,sys; s=json.load(sys.stdin); assert s["tau"] == 0.5 and "routed" not in s, s' \
  || fail "tau without --eval-data"
# A router file handed over as the SLM says what it is and where it goes.
if "$cli" generate --slm "$tmp/r.gguf" --llm "$llm" -p "Once upon a time" -n 4 >/dev/null 2>"$tmp/err"; then
  fail "a router file loaded as the SLM"
fi
grep -q "is a tokroute router file, not a model: .*--router FILE" "$tmp/err" || fail "router as --slm: $(cat "$tmp/err")"
echo "ok: train-router checks --out first and stores the calibrated tau; calibrate asks for --slm by name"

# Ctrl-C after an epoch: the best epoch so far is written (exit 130) and is a working router.
rm -f "$tmp/r.gguf"
"$cli" train-router --data "$tmp/train" --out "$tmp/r.gguf" --hidden 64,64 --epochs 100000 --patience 100000 \
  --batch 16 -t 1 2>"$tmp/train.err" &
pid=$!
for _ in $(seq 600); do grep -q "^epoch   2" "$tmp/train.err" && break; sleep 0.05; done
grep -q "^epoch   2" "$tmp/train.err" || fail "no epoch in 30 s: $(cat "$tmp/train.err")"
kill -INT "$pid"
rc=0
timeout 30 tail --pid="$pid" -f /dev/null || fail "train-router did not stop on Ctrl-C"
wait "$pid" || rc=$?
[ "$rc" = 130 ] || fail "exit $rc after Ctrl-C (want 130): $(cat "$tmp/train.err")"
grep -q "interrupted: training stopped in epoch [0-9]*; the best epoch so far ([0-9]*) was written" "$tmp/train.err" \
  || fail "no interruption message: $(cat "$tmp/train.err")"
"$cli" calibrate --router "$tmp/r.gguf" --data "$tmp/eval" --target-routed 0.1 >/dev/null 2>&1 \
  || fail "the interrupted run's router does not load"
echo "ok: Ctrl-C during train-router writes the best epoch so far"

# ---------------------------------------------------------------- generate --server: Ctrl-C, a dead LLM, its context
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
start_serve() { # start_serve NAME [serve options]: sets $url and $serve_pid
  local name=$1; shift
  "$cli" serve -m "$llm" --port 0 --ready-file "$tmp/$name.ready" -t 1 --quiet "$@" 2>"$tmp/$name.log" &
  serve_pid=$!
  pids+=("$serve_pid")
  url=$(wait_ready "$tmp/$name.ready" "$serve_pid") || fail "serve $name: $(cat "$tmp/$name.log")"
}
active_sessions() { curl -sS "$url/metrics" | awk '$1 == "tokroute_active_sessions" {print $2}'; }
routed=(generate --slm "$slm" -p "Once upon a time" --threshold 1 --ignore-eos --sync)  # every token routed

start_serve main
# /v1/completions refuses \u0000 as the session protocol does (docs/protocol.md) instead of cutting the prompt.
code=$(curl -H 'Content-Type: application/json' -sS -o "$tmp/nul.json" -w '%{http_code}' "$url/v1/completions" -d '{"prompt":"Once\u0000 upon","max_tokens":1}')
[ "$code" = 400 ] && grep -q 'u0000' "$tmp/nul.json" || fail "completions with \\u0000: $code $(cat "$tmp/nul.json")"

# Ctrl-C: the run stops within a second or two, keeps what it printed, and deletes its session on the server.
"$cli" "${routed[@]}" --server "$url" -n 400 --simulate-rtt 30 --ids >"$tmp/int.out" 2>"$tmp/int.err" &
gen=$!
for _ in $(seq 200); do [ -s "$tmp/int.out" ] && break; sleep 0.05; done
[ -s "$tmp/int.out" ] || fail "generate --server printed nothing: $(cat "$tmp/int.err")"
[ "$(active_sessions)" = 1 ] || fail "no session on the server while generating"
t0=$(date +%s%N)
kill -INT "$gen"
rc=0
wait "$gen" || rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$rc" = 130 ] || fail "exit $rc after Ctrl-C (want 130): $(cat "$tmp/int.err")"
[ "$ms" -lt 3000 ] || fail "Ctrl-C took $ms ms"
grep -q "interrupted" "$tmp/int.err" || fail "no 'interrupted' on stderr"
n=$(wc -w <"$tmp/int.out"); [ "$n" -gt 0 ] && [ "$n" -lt 400 ] || fail "$n ids printed before Ctrl-C"
[ "$(active_sessions)" = 0 ] || fail "the session outlived the client (Ctrl-C in $ms ms)"
echo "ok: Ctrl-C during generate --server ends in $ms ms and deletes the session"
kill -TERM "$serve_pid"
wait "$serve_pid" || fail "serve exited badly on SIGTERM"

# The server's context (-c, from /health) shorter than the prompt + -n: said up front, generation ends there.
start_serve short -c 64
"$cli" "${routed[@]}" --server "$url" -n 200 --ids >"$tmp/short.out" 2>"$tmp/short.err" || fail "short context: $(cat "$tmp/short.err")"
grep -q "warning: the LLM server's context is 64 tokens (its -c): generating at most 59 tokens after the 5-token prompt, not 200" \
  "$tmp/short.err" || fail "no context warning: $(cat "$tmp/short.err")"
[ "$(wc -w <"$tmp/short.out")" = 59 ] || fail "$(wc -w <"$tmp/short.out") tokens generated, want 59"
grep -q "LLM unavailable (fallback) *0$" "$tmp/short.err" || fail "fell back at the context's end: $(cat "$tmp/short.err")"
"$cli" ui --slm "$slm" --server "$url" --sync --port 0 --ready-file "$tmp/short-ui.ready" 2>"$tmp/short-ui.log" &
pids+=($!)
short_ui=$!
ui_url=$(wait_ready "$tmp/short-ui.ready" "$short_ui") || fail "ui --server: $(cat "$tmp/short-ui.log")"
curl -sS -N --max-time 60 -H "Content-Type: application/json" "$ui_url/api/generate" \
  -d '{"prompt":"Once upon a time","mode":"joint","tau":1,"max_tokens":100}' >"$tmp/short-ui.sse" || fail "ui generate"
python3 - "$tmp/short-ui.sse" <<'PY' || fail "ui at the server's context: $(cat "$tmp/short-ui.sse" | head -c 600)"
import json, sys
lines = open(sys.argv[1]).read().split("\n")
events = [(l[len("event: "):], json.loads(lines[i + 1][len("data: "):])) for i, l in enumerate(lines) if l.startswith("event: ")]
warnings = [d["message"] for e, d in events if e == "warning"]
assert warnings == ["the LLM server's context is 64 tokens: at most 59 tokens after this prompt"], warnings
done = next(d for e, d in events if e == "done")
assert done["n_tokens"] == 59 and done["n_fallback"] == 0 and done["stop"] == "length", done
PY
kill -TERM "$short_ui"
wait "$short_ui" || fail "ui exited badly on SIGTERM"
echo "ok: the server's context is read from /health and respected (generate and ui)"
kill -TERM "$serve_pid"
wait "$serve_pid" || fail "serve -c 64 exited badly on SIGTERM"

# The LLM disappears mid-run (SIGSTOP) and comes back (SIGCONT): one warning line when the fallback starts, one
# when the LLM answers again; the summary's fields add up (routed tokens waited for = requests + refused at once).
# The trace goes to a FIFO read slowly through a one-page pipe, so the run lasts past the circuit breaker's 1 s.
start_serve outage
mkfifo "$tmp/trace.fifo"
python3 - "$tmp/trace.fifo" "$tmp/trace.jsonl" <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.fcntl(fd, 1031, 4096)  # F_SETPIPE_SZ: the writer blocks once a page is unread
with open(sys.argv[2], "wb", buffering=0) as out:
    while chunk := os.read(fd, 4096):
        out.write(chunk)
        time.sleep(0.12)
PY
reader=$!
"$cli" "${routed[@]}" --server "$url" -n 480 --timeout-ms 400 --retries 0 --trace "$tmp/trace.fifo" --summary-json \
  >/dev/null 2>"$tmp/dead.err" &
gen=$!
for _ in $(seq 400); do [ "$(wc -l <"$tmp/trace.jsonl" 2>/dev/null || echo 0)" -ge 50 ] && break; sleep 0.05; done
kill -STOP "$serve_pid"
for _ in $(seq 200); do grep -q "did not answer" "$tmp/dead.err" && break; sleep 0.05; done
kill -CONT "$serve_pid"
wait "$gen" || fail "generate with a stopped server: $(cat "$tmp/dead.err")"
wait "$reader"
[ "$(grep -c "warning: the LLM did not answer at token" "$tmp/dead.err")" = 1 ] || fail "fallback warnings: $(cat "$tmp/dead.err")"
[ "$(grep -c "the LLM answers again at token" "$tmp/dead.err")" = 1 ] || fail "comeback lines: $(cat "$tmp/dead.err")"
python3 - "$tmp/dead.err" "$tmp/trace.jsonl" <<'PY' || fail "summary after the outage: $(tail -1 "$tmp/dead.err")"
import json, re, sys
err = open(sys.argv[1]).read()
s = json.loads(err.strip().splitlines()[-1])
assert s["n_tokens"] == 480 and s["n_fallback"] > 0 and s["llm_failed"] >= 1 and s["llm_refused"] >= 1, s
# every token was routed: answered by the LLM or fallen back; each one waited for, by a request or refused at once
assert s["n_routed"] + s["n_fallback"] == s["llm_blocking"] == s["llm_calls"] + s["llm_refused"] == 480, s
rows = [json.loads(l) for l in open(sys.argv[2])]
first = next(r["index"] for r in rows if r.get("llm_unavailable"))
back = next(r["index"] for r in rows if r["index"] > first and r["source"] == "llm")
assert f"did not answer at token {first};" in err and f"answers again at token {back} (" in err, (first, back)
assert f"({sum(1 for r in rows if r.get('llm_unavailable'))} routed tokens fell back meanwhile)" in err
PY
echo "ok: a dead LLM is reported when the fallback starts and when it answers again; the summary adds up"

# The web UI's done event names the same fields: with the LLM down every routed token is waited for, by a request
# that failed or refused at once by the circuit breaker: llm_blocking = llm_calls + llm_refused = the fallbacks.
dead=$(free_port)
"$cli" ui --slm "$slm" --server "http://127.0.0.1:$dead" --sync --timeout-ms 300 --retries 0 --port 0 \
  --ready-file "$tmp/dead-ui.ready" 2>"$tmp/dead-ui.log" &
pids+=($!)
ui_url=$(wait_ready "$tmp/dead-ui.ready" "${pids[-1]}") || fail "ui with a dead LLM: $(cat "$tmp/dead-ui.log")"
curl -sS -N --max-time 60 -H "Content-Type: application/json" "$ui_url/api/generate" \
  -d '{"prompt":"Once upon a time","mode":"joint","tau":1,"max_tokens":40}' >"$tmp/dead-ui.sse" || fail "ui generate"
python3 - "$tmp/dead-ui.sse" <<'PY' || fail "ui done event: $(grep -A1 'event: done' "$tmp/dead-ui.sse")"
import json, sys
lines = open(sys.argv[1]).read().split("\n")
done = json.loads(next(lines[i + 1][len("data: "):] for i, l in enumerate(lines) if l == "event: done"))
assert done["n_tokens"] == 40 and done["n_fallback"] >= 30 and done["llm_calls"] == done["llm_failed"] >= 1, done
assert done["llm_blocking"] == done["llm_calls"] + done["llm_refused"] == done["n_fallback"], done
PY
echo "ok: the UI's done event counts requests sent, failed and refused apart from routed tokens waited for"
