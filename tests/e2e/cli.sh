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
refused "${one[@]}" --threshold 1.5 -- "--threshold applies to routed generation"
refused "${one[@]}" --policy maxprob -- "--policy applies to routed generation"
pair=(generate --slm "$slm" --llm "$llm" -p "Once upon a time" -n 4)
refused "${pair[@]}" --mode slm --threshold 0.5 -- "mode slm routes nothing"
refused "${pair[@]}" --mode llm --policy margin -- "mode llm routes nothing"
refused "${pair[@]}" --policy bogus -- "unknown --policy 'bogus'"
refused "${pair[@]}" --policy mlp -- "a trained router: --router FILE"
for t in nan NaN inf -inf; do refused "${pair[@]}" --threshold "$t" -- "--threshold must be a finite number"; done
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
kill -TERM "${pids[@]}"
wait "${pids[@]}" || fail "a server exited badly on SIGTERM"
pids=()
[ ! -e "$tmp/serve.ready" ] && [ ! -e "$tmp/ui.ready" ] || fail "a ready file outlived its server"
if "$cli" serve -m "$llm" --host no-such-host.invalid --port 0 2>"$tmp/err"; then fail "serve on a bad host name"; fi
grep -q "cannot use host 'no-such-host.invalid'" "$tmp/err" || fail "bad host message: $(cat "$tmp/err")"
echo "ok: serve and ui take --host localhost and write the same ready file"

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
# calibrate names the flag a token-embedding router needs, not a library function.
refused calibrate --router "$tmp/r.gguf" --data "$tmp/eval" --target-routed 0.15 -- "give --slm SLM.gguf"
grep -q "tr_router_set_slm" "$tmp/err" && fail "calibrate names a library function: $(cat "$tmp/err")"
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
