#!/usr/bin/env bash
# train_epoch.sh — the trainer's epoch time, two builds alternating (A B A B ...) on the same data: each run trains
# EPOCHS epochs and the time between the first and the last epoch line, divided by EPOCHS - 1, is its epoch (the
# loading and the first epoch left out); the whole run's wall and CPU time and the load go next to it.
# usage: bench/train_epoch.sh TOKROUTE_A TOKROUTE_B DATA [ROUNDS (3)] [EPOCHS (4)] [THREADS (2)]
#   e.g. bench/train_epoch.sh ../main/build/tokroute build/tokroute /tmp/lev/train,/tmp/r3/s1,/tmp/r3/s2,/tmp/r3/s3
set -euo pipefail
a=$1
b=$2
data=$3
rounds=${4:-3}
epochs=${5:-4}
threads=${6:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-6s %-40s %-10s %-22s %s\n' round build "epoch s" "run wall / user / sys" load
for ((r = 1; r <= rounds; r++)); do
  for bin in "$a" "$b"; do
    load0=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -f "%e %U %S" -o "$tmp/time" "$bin" train-router --data "$data" --out "$tmp/r.gguf" \
      --epochs "$epochs" --patience "$epochs" -t "$threads" 2>&1 >/dev/null |
      while IFS= read -r line; do case "$line" in epoch*) echo "$(date +%s.%N)" ;; esac; done >"$tmp/stamps"
    epoch=$(awk -v n="$epochs" 'NR == 1 { a = $1 } NR == n { b = $1 } END { printf "%.2f", (b - a) / (n - 1) }' "$tmp/stamps")
    printf '%-6s %-40s %-10s %-22s %s-%s\n' "$r" "$bin" "$epoch" "$(tr ' ' / <"$tmp/time")" "$load0" \
      "$(cut -d' ' -f1 /proc/loadavg)"
  done
done
