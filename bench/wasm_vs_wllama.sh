#!/usr/bin/env bash
# wasm_vs_wllama.sh [--json] [--threads 1,2] [--pp 64] [--tg 32] [--reps 2] [MODEL.gguf...] — prefill and decode
# tokens/s of tokroute's WebAssembly build (bench/wasm/bench_wasm.c: the device core, emcc -O3 -msimd128 -pthread)
# and of wllama (npm @wllama/wllama 3.x: llama.cpp in WebAssembly) on the same GGUF in the same headless Chromium,
# a cross-origin isolated page (COOP/COEP, so both have threads), side by side with native tokroute (`tokroute
# bench`) at the same thread counts. Best of R repetitions after a warm-up, each engine in a fresh page. A benchmark,
# not a test: the figures depend on the machine and its load (printed with them).
# Default models: random-weight qwen2.5-0.5b in Q4_0 and Q4_K_M (`tokroute synth`), cached in ~/.cache/tokroute/synth.
# Needs emscripten and node-acorn (Debian), chromium, tests/ui's playwright-core; wllama is installed from npm into
# ~/.cache/tokroute/wllama (outside the repository) on first use. Prints a table, or JSON lines with --json (the
# last one the machine: browser, cores, load average before and after); --table FILE prints the table of such lines.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
json=0 threads=1,2 pp=64 tg=32 reps=2 models=() table=
while [ $# -gt 0 ]; do
  case "$1" in
    --json) json=1 ;;
    --threads) threads=$2; shift ;;
    --pp) pp=$2; shift ;;
    --tg) tg=$2; shift ;;
    --reps) reps=$2; shift ;;
    --table) table=$2; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) models+=("$1") ;;
  esac
  shift
done
results=$(mktemp)
trap 'rm -f "$results"' EXIT
if [ -n "$table" ]; then cp "$table" "$results"; else
cache=${XDG_CACHE_HOME:-$HOME/.cache}/tokroute
build=$root/build
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTR_TESTS=AUTO >/dev/null
cmake --build "$build" -j"$(nproc)" --target tokroute >/dev/null
tokroute=$build/tokroute
if [ ${#models[@]} -eq 0 ]; then
  mkdir -p "$cache/synth"
  for t in q4_0 q4_k_m; do
    m=$cache/synth/qwen2.5-0.5b-$t.gguf
    [ -f "$m" ] || "$tokroute" synth --shape qwen2.5-0.5b --type "$t" -o "$m" >&2
    models+=("$m")
  done
fi
wllama=$cache/wllama/node_modules/@wllama/wllama
if [ ! -f "$wllama/esm/index.js" ]; then
  mkdir -p "$cache/wllama"
  [ -f "$cache/wllama/package.json" ] || echo '{"name":"tokroute-wllama-cache","private":true}' >"$cache/wllama/package.json"
  (cd "$cache/wllama" && npm install --no-audit --no-fund --loglevel=error '@wllama/wllama@3' >&2)
fi
wasm_out=$build/wasm-bench
"$root/bench/wasm/build.sh" "$wasm_out" >&2
export NODE_PATH=/usr/share/nodejs:$root/tests/ui/node_modules${NODE_PATH:+:$NODE_PATH}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for m in "${models[@]}"; do
  for t in ${threads//,/ }; do
    "$tokroute" bench -m "$m" -t "$t" --prompt "$pp" --gen "$tg" --reps "$reps" --json |
      python3 -c 'import json,sys,os; r=json.load(sys.stdin); print(json.dumps({"model": os.path.basename(sys.argv[1]),
"engine": "tokroute-native", "threads_asked": int(sys.argv[2]), "threads": r["threads"], "isa": r["isa"],
"pp": r["prefill_tps_best"], "tg": r["decode_tps_best"]}))' "$m" "$t" >>"$results"
  done
done
(cd "$root/bench/wasm" && node run.mjs --build "$wasm_out" --wllama "$wllama" --models "$(IFS=,; echo "${models[*]}")" \
  --threads "$threads" --pp "$pp" --tg "$tg" --reps "$reps") >>"$results"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
printf '{"machine": {"browser": "%s", "cores": %d, "load_before": "%s", "load_after": "%s"}}\n' \
  "$(chromium --version 2>/dev/null | head -1)" "$(nproc)" "$load_before" "$load_after" >>"$results"
fi
if [ "$json" = 1 ]; then cat "$results"; exit 0; fi
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
machine = next((r["machine"] for r in rows if "machine" in r), {})
rows = [r for r in rows if "machine" not in r]
by = {(r["model"], r["engine"], r["threads_asked"]): r for r in rows}
def f(r, k): return f'{r[k]:7.1f}' if r and k in r else '      -'
def x(a, b, k): return f'{a[k] / b[k]:5.1f}x' if a and b and b.get(k) else '     -'
print(f'{machine.get("browser", "?")}, {machine.get("cores", "?")} cores, load average {machine.get("load_before", "?")} '
      f'before, {machine.get("load_after", "?")} after; tokens/s, best of runs')
print(f'{"model":<26} {"thr":>3} | {"tokroute wasm":>15} | {"wllama":>15} | {"wasm/wllama":>13} | {"native tokroute":>15} | {"wasm/native":>11}')
print(f'{"":<26} {"":>3} | {"pp":>7} {"tg":>7} | {"pp":>7} {"tg":>7} | {"pp":>6} {"tg":>6} | {"pp":>7} {"tg":>7} | {"pp":>5} {"tg":>5}')
for (model, engine, t) in sorted({(r["model"], r["engine"], r["threads_asked"]) for r in rows}):
    if engine != "tokroute-native": continue
    n, w, l = by.get((model, "tokroute-native", t)), by.get((model, "tokroute-wasm", t)), by.get((model, "wllama", t))
    pct = lambda k: f'{100 * w[k] / n[k]:4.0f}%' if w and n and n.get(k) else '    -'
    print(f'{model:<26} {t:>3} | {f(w,"pp")} {f(w,"tg")} | {f(l,"pp")} {f(l,"tg")} | {x(w,l,"pp")} {x(w,l,"tg")} | '
          f'{f(n,"pp")} {f(n,"tg")} | {pct("pp")} {pct("tg")}')
errors = [r for r in rows if "error" in r]
for r in errors: print(f'ERROR {r["model"]} {r["engine"]} {r["threads_asked"]} threads: {r["error"][:300]}')
sys.exit(1 if errors else 0)
PY
