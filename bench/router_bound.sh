#!/usr/bin/env bash
# router_bound.sh — how far the trained router is from its bound (issue 32) and what more data buys, on the demo
# pair. The split of docs/train.md ("Toward the bound"): train on stories 200-999 of the validation file plus the
# first N stories sampled from the LLM (seed 1), evaluate on stories 0-199 (never trained or tuned on) and on 300
# stories sampled with seed 777 (text outside the validation file). For each N of the list and each seed it trains
# the defaults (`train-router --data D`, extra options appended) and prints the share of the bound's gap closed at
# 10% and 20% routed, held-out and unseen, and the training time; with N = 0 it also prints the share the router
# reaches on its own training positions (capacity against generalisation).
# usage: bench/router_bound.sh TOKROUTE_BIN SHARED_DIR WORK_DIR [SAMPLES (0 1000 2000 4000)] [SEEDS (1 2 3)] [-- OPTS]
#   e.g. bench/router_bound.sh build/tokroute ../shared /tmp/rb "0 4000" "1 2 3"
#   the defaults read the previous position (--context 1); `-- --context 0` gives the routers before issue 32's
#   context row, to compare on the same machine
# The collected folders stay in WORK_DIR and are reused; samples are collected in chunks of 1000 (s0, s1, ...).
set -euo pipefail
cli=$1
shared=$2
work=$3
sizes=${4:-0 1000 2000 4000}
seeds=${5:-1 2 3}
shift $(($# < 5 ? $# : 5))
[ "${1:-}" = "--" ] && shift
extra=("$@")
M=(--slm "$shared/models/stories-student.gguf" --llm "$shared/models/stories260K.gguf")
stories=$shared/data/tinystories/tinystories_val.txt
mkdir -p "$work"

collect() { # out args...
  local out=$1
  shift
  [ -s "$work/$out/index.bin" ] || nice "$cli" collect "${M[@]}" "$@" --out "$work/$out" -t 1 --json >/dev/null
}
collect train --data "$stories" --format text --range 200:1000
collect eval --data "$stories" --format text --range 0:200
collect unseen --format llm-sample --seed 777 --range 0:300
max=0
for n in $sizes; do [ "$n" -gt "$max" ] && max=$n; done
chunks=$(((max + 999) / 1000))
for ((c = 0; c < chunks; c++)); do collect "s$c" --format llm-sample --range $((c * 1000)):$(((c + 1) * 1000)); done

# "router" row of a gap table on stderr: the share of the bound at each routed share, e.g. "66% 67%"
shares() { awk '/^router/ { s = ""; while (match($0, /\[ *[0-9]+%\]/)) { v = substr($0, RSTART + 1, RLENGTH - 2);
  gsub(/ /, "", v); s = s (s ? " " : "") v; $0 = substr($0, RSTART + RLENGTH) } print s }'; }
unseen_shares() { # router
  for t in 0.1 0.2; do
    nice "$cli" calibrate --router "$1" --data "$2" --target-routed $t --gap 2>&1 >/dev/null | shares
  done | tr '\n' ' '
}

printf '%-8s %-5s %-22s %-22s %s\n' samples seed "held-out 10% / 20%" "unseen 10% / 20%" "train s (load)"
for n in $sizes; do
  data=$work/train
  for ((c = 0; c < (n + 999) / 1000; c++)); do data=$data,$work/s$c; done
  for seed in $seeds; do
    r=$work/r_${n}_$seed.gguf
    t0=$(date +%s.%N)
    held=$(nice "$cli" train-router --data "$data" --out "$r" --eval-data "$work/eval" --routed 0.1,0.2 --seed "$seed" \
      -t 2 "${extra[@]}" 2>&1 >/dev/null | shares)
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    load=$(cut -d' ' -f1 /proc/loadavg)
    printf '%-8s %-5s %-22s %-22s %.0f (%s)\n' "$n" "$seed" "$held" "$(unseen_shares "$r" "$work/unseen")" "$secs" "$load"
    [ "$n" = 0 ] && printf '%-8s %-5s own training positions: %s\n' "$n" "$seed" "$(unseen_shares "$r" "$work/train")"
  done
done
