#!/usr/bin/env bash
# wasm_ab.sh [--rounds N] [--pp 32] [--tg 16] BASE_COMMIT [MODEL.gguf...] — tokroute's WebAssembly build at
# BASE_COMMIT against the working tree's, in the same headless Chromium page as bench/wasm_vs_wllama.sh runs it
# (bench/wasm/run.mjs, tokroute only), alternating the two builds (base, this, base, this, ...) for N rounds (2), and
# prints per model × threads × pp/tg the figures of each round and the median ratio this/base, with the load average
# before and after. A benchmark, not a test: on a shared machine only ratios taken this way mean much. BASE_COMMIT's
# tree goes to build/wasm-ab-base (git archive) and its bundle to build/wasm-ab-base/wb; this tree's to
# build/wasm-bench (as wasm_vs_wllama.sh). Default models: wasm_vs_wllama.sh's (qwen2.5-0.5b Q4_K_M and Q4_0).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=2 pp=32 tg=16 base= models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift ;;
    --pp) pp=$2; shift ;;
    --tg) tg=$2; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) if [ -z "$base" ]; then base=$1; else models+=("$1"); fi ;;
  esac
  shift
done
[ -n "$base" ] || { echo "usage: bench/wasm_ab.sh [--rounds N] BASE_COMMIT [MODEL.gguf...]" >&2; exit 2; }
cache=${XDG_CACHE_HOME:-$HOME/.cache}/tokroute
if [ ${#models[@]} -eq 0 ]; then
  for t in q4_k_m q4_0; do
    m=$cache/synth/qwen2.5-0.5b-$t.gguf
    [ -f "$m" ] || { echo "wasm_ab: no $m (bench/wasm_vs_wllama.sh makes it)" >&2; exit 1; }
    models+=("$m")
  done
fi
tree=$root/build/wasm-ab-base
rm -rf "$tree" && mkdir -p "$tree"
git -C "$root" archive "$base" | tar -x -C "$tree"
"$tree/bench/wasm/build.sh" "$tree/wb" >&2
"$root/bench/wasm/build.sh" "$root/build/wasm-bench" >&2
export NODE_PATH=/usr/share/nodejs:$root/tests/ui/node_modules${NODE_PATH:+:$NODE_PATH}
results=$(mktemp)
trap 'rm -f "$results"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$rounds"); do
  for tag in base this; do
    dir=$tree/wb
    [ "$tag" = this ] && dir=$root/build/wasm-bench
    (cd "$root/bench/wasm" && node run.mjs --build "$dir" --wllama "$dir" --engines tokroute \
      --models "$(IFS=,; echo "${models[*]}")" --threads 1,2 --pp "$pp" --tg "$tg" --reps 2) |
      sed "s/^{/{\"tag\":\"$tag\",/" >>"$results"
  done
done
echo "base $base against the working tree ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ', modified')); load average $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for r in rows:
    if "error" in r: print("ERROR", r["tag"], r["model"], r["threads_asked"], r["error"][:300])
for key in sorted({(r["model"], r["threads_asked"]) for r in rows}):
    for k in ("pp", "tg"):
        get = lambda tag: [r[k] for r in rows if (r["model"], r["threads_asked"]) == key and r["tag"] == tag and k in r]
        b, t = get("base"), get("this")
        ratio = statistics.median(x / y for x, y in zip(t, b)) if b and t else float("nan")
        print(f"{key[0]:<26} {key[1]} thr {k}: base {b}  this {t}  this/base median {ratio:.2f}x  load_s {[r.get('load_s') for r in rows if (r['model'], r['threads_asked']) == key and r['tag'] == 'this']}")
PY
