#!/usr/bin/env bash
# compare-llamacpp.sh — tokroute against llama.cpp's llama-bench on the same random-weight files, side by side in one
# run: prefill (pp) and decode (tg) tokens/s at the same sizes and thread count, their ratios, and decode's achieved
# weight-read rate (the bytes one decoded token reads × tokens/s: tokroute bench's token_read_bytes, the weights
# with each row-lookup table — token_embd when the output is separate, gemma4's per-layer token embeddings —
# counted one row) against the memory-read bandwidth bench_membw measures beside each round. llama-bench is built once by
# scripts/llamacpp.sh (cached in ~/.cache/tokroute); the model files are written once by `tokroute synth` into
# ~/.cache/tokroute/synth.
#
#   bench/compare-llamacpp.sh [--build DIR] [-t THREADS] [--pp N] [--tg N] [--reps R] [--rounds N] [--quick]
#                             [--cases LIST] [--amx]
#     --build DIR   tokroute build folder with tokroute and bench_membw (default: build)
#     --rounds N    run the two engines N times each, alternating (llama-bench, tokroute, llama-bench, ...), and
#                   report the median tok/s of each and the median ratio of the N paired rounds with its range
#                   (min-max): on a shared machine a neighbour's burst then hits both engines alike (default 1)
#     --amx         use llama.cpp's default native build, Intel AMX kernels included. By default llama-bench is
#                   built without them: in VMs that do not grant AMX to the guest they crash llama.cpp.
#     --quick       two cases only (qwen3-0.6b Q4_K_M, qwen2.5-0.5b Q4_0)
#     --cases LIST  comma-separated shape:type pairs, e.g. qwen2.5-0.5b:q8_0,llama-3.2-1b:q4_k_m or the IQ4 types,
#                   qwen2.5-0.5b:iq4_nl,qwen3-0.6b:iq4_xs (writing an IQ4 file takes ~3 minutes: the quantizer
#                   searches scales, as llama-quantize does). A type lq-NAME is written by llama.cpp's own
#                   llama-quantize from the shape's F16 synth file, as the mixes people download are made:
#                   qwen2.5-0.5b:lq-q3_k_m,qwen2.5-0.5b:lq-q2_k (q2_k / q3_k alone: every matrix in the type)
# Defaults: 2 threads, pp 64, tg 32, 2 repetitions: about 4-8 minutes for the nine default cases on 2 cores (the
# first run also builds llama-bench, ~10 minutes, and writes the model files).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build threads=2 pp=64 tg=32 reps=2 rounds=1 no_amx=1
cases="qwen3-0.6b:q4_k_m,qwen2.5-0.5b:q4_0,qwen2.5-0.5b:q6_k,qwen2.5-0.5b:q4_k_m,qwen2.5-0.5b:q5_k,llama-3.2-1b:q4_k_m,qwen2.5-1.5b:q4_0,gemma3-270m:q4_0,gemma3-270m:q8_0"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    -t|--threads) threads=$2; shift 2 ;;
    --pp) pp=$2; shift 2 ;;
    --tg) tg=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --quick) cases="qwen3-0.6b:q4_k_m,qwen2.5-0.5b:q4_0"; shift ;;
    --cases) cases=$2; shift 2 ;;
    --amx) no_amx=0; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare-llamacpp: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
tokroute=$build/tokroute
[ -x "$tokroute" ] && [ -x "$build/bench_membw" ] ||
  { echo "compare-llamacpp: build tokroute first ($tokroute, $build/bench_membw missing)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "compare-llamacpp: python3 is needed to read the JSON results" >&2; exit 1; }
bin=$(LLAMACPP_NO_AMX=$no_amx scripts/llamacpp.sh llama-bench)
cache=${TOKROUTE_CACHE:-$HOME/.cache/tokroute}/synth
mkdir -p "$cache"
llama_src=$(git -C "$bin/../../src" log -1 --format='%cd %h' --date=short 2>/dev/null || echo unknown)

results=$(mktemp)
trap 'rm -f "$results"' EXIT
IFS=, read -r -a list <<<"$cases"
i=0
for c in "${list[@]}"; do
  i=$((i + 1))
  shape=${c%%:*} type=${c##*:}
  file=$cache/$shape-$type.gguf
  if [ ! -s "$file" ] && [ "${type#lq-}" != "$type" ]; then
    f16=$cache/$shape-f16.gguf
    if [ ! -s "$f16" ]; then
      echo "[$i/${#list[@]}] writing $f16" >&2
      "$tokroute" synth --shape "$shape" --type f16 -o "$f16.tmp" >/dev/null && mv "$f16.tmp" "$f16"
    fi
    echo "[$i/${#list[@]}] writing $file (llama-quantize ${type#lq-})" >&2
    qbin=$(LLAMACPP_NO_AMX=$no_amx scripts/llamacpp.sh llama-quantize)
    "$qbin/llama-quantize" "$f16" "$file.tmp" "${type#lq-}" "$threads" >"$file.log" 2>&1 ||
      { echo "compare-llamacpp: llama-quantize failed (see $file.log)" >&2; exit 1; }
    mv "$file.tmp" "$file"
  elif [ ! -s "$file" ]; then
    echo "[$i/${#list[@]}] writing $file" >&2
    "$tokroute" synth --shape "$shape" --type "$type" -o "$file.tmp" >/dev/null && mv "$file.tmp" "$file"
  fi
  for round in $(seq "$rounds"); do
    echo "[$i/${#list[@]}] $shape $type: llama-bench (round $round/$rounds)" >&2
    lj=$("$bin/llama-bench" -m "$file" -t "$threads" -p "$pp" -n "$tg" -r "$reps" -o json 2>/dev/null) ||
      { echo "compare-llamacpp: llama-bench failed on $file (rerun it by hand to see why)" >&2; exit 1; }
    echo "[$i/${#list[@]}] $shape $type: tokroute bench (round $round/$rounds)" >&2
    tj=$("$tokroute" bench -m "$file" -t "$threads" --prompt "$pp" --gen "$tg" --reps "$reps" --json) ||
      { echo "compare-llamacpp: tokroute bench failed on $file" >&2; exit 1; }
    # The read bandwidth swings with the VM's neighbours (28-39 GB/s on one quiet evening): probe it beside each
    # round, so a row's share is of the bandwidth measured next to it, not at the run's start.
    echo "[$i/${#list[@]}] $shape $type: bench_membw (round $round/$rounds)" >&2
    bw=$("$build/bench_membw" --threads "$threads" --reps 3 | awk '/^membw_gbps/ {print $2}')
    printf '%s\t%s\t%s\t%s\t%s\n' "$shape" "$type" "$(echo "$lj" | tr -d '\n')" "$tj" "$bw" >>"$results"
  done
done

python3 - "$results" "$threads" "$pp" "$tg" "$llama_src" "$rounds" <<'EOF'
import json, statistics, sys
path, threads, pp, tg, src, rounds = sys.argv[1], *sys.argv[2:5], sys.argv[5], int(sys.argv[6])
cases = {}  # name -> rounds of (tokroute prefill, decode, llama.cpp prefill, decode, bytes a token reads, read GB/s)
for line in open(path):
    shape, qtype, lj, tj, bw = line.rstrip("\n").split("\t")
    ll, tr = json.loads(lj), json.loads(tj)
    lpp = next(r for r in ll if r["n_prompt"] > 0 and r["n_gen"] == 0)
    ltg = next(r for r in ll if r["n_gen"] > 0 and r["n_prompt"] == 0)
    label = f"{qtype[3:].upper()} (llama-quantize)" if qtype.startswith("lq-") else qtype.upper()
    cases.setdefault(f"{shape} {label}", []).append(
        (tr["prefill_tps"], tr["decode_tps"], lpp["avg_ts"], ltg["avg_ts"], tr["token_read_bytes"], float(bw or 0)))
print(f"tokroute ({tr['isa']}) vs llama.cpp llama-bench (source {src}), {threads} threads, pp {pp}, tg {tg}"
      + (f", {rounds} alternating rounds: medians, ratio = median of the paired rounds' ratios [min-max]" if rounds > 1 else ""))
med = statistics.median
probes = [r[5] for rs in cases.values() for r in rs]
print(f"memory-read bandwidth (bench_membw, {threads} threads, probed beside each round): median {med(probes):.1f} GB/s"
      f" [{min(probes):.1f}-{max(probes):.1f}]; a row's % is of the median of its own rounds' probes")
print()
print("| shape / file | tokroute prefill / decode tok/s | llama.cpp prefill / decode | ratio prefill / decode | GB a token reads | decode GB/s tokroute / llama.cpp (% of read bw) |")
print("|---|---|---|---|---|---|")
for name, rs in cases.items():
    tp, td, lp, ld = (med(r[k] for r in rs) for k in range(4))
    size = rs[0][4]
    rp, rd = [r[0] / r[2] for r in rs], [r[1] / r[3] for r in rs]
    spread = lambda v: f" [{min(v):.2f}-{max(v):.2f}]" if len(v) > 1 else ""
    gt, gl = td * size / 1e9, ld * size / 1e9
    membw = med(r[5] for r in rs)
    pct = lambda g: f"{100 * g / membw:.0f}%" if membw > 0 else "?"
    print(f"| {name} | {tp:.1f} / {td:.1f} | {lp:.1f} / {ld:.1f} | {med(rp):.2f}{spread(rp)} / **{med(rd):.2f}**{spread(rd)} | "
          f"{size / 1e9:.3f} | {gt:.1f} ({pct(gt)}) / {gl:.1f} ({pct(gl)}) |")
EOF
