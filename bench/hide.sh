#!/usr/bin/env bash
# hide.sh — what speculation + lookahead save on the demo pair (stories-student SLM, stories260K LLM, embedded, with
# a simulated round trip): per simulated RTT (50, 170 ms) and routed share (maxprob tau chosen for ≈5/10/20%),
# --sync vs the default (speculate-depth 8, lookahead 4) and lookahead 16: blocking round trips per 100 tokens and mean time between
# tokens; the RTT-induced part of it is TBT minus the same run's TBT at RTT 0. Also the SLM/LLM agreement rate at
# routed positions (from --sync traces: slm_id == id), which bounds what speculation alone can keep.
# usage: bench/hide.sh [BUILD_DIR] [SHARED_DIR] [N_TOKENS]
set -euo pipefail
build=${1:-build}
shared=${2:-../shared}
n=${3:-128}
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prompts=("Once upon a time" "Tom and his dog went to the park." "The little bird" "Lily wanted to")
run() { # tau rtt mode-flags... → one summary-json line per prompt in $tmp/out, traces in $tmp/trace.N
  local tau=$1 rtt=$2
  shift 2
  : >"$tmp/out"
  local i=0
  for p in "${prompts[@]}"; do
    "$build/tokroute" generate --slm "$slm" --llm "$llm" -p "$p" --policy maxprob --threshold "$tau" -n "$n" \
      --ignore-eos --ids -t 1 --simulate-rtt "$rtt" --summary-json --trace "$tmp/trace.$i" "$@" >"$tmp/ids.$i" \
      2>>"$tmp/out"
    i=$((i + 1))
  done
}
summ() { # label → "routed% blocking/100 tbt agree" from $tmp/out and traces
  python3 - "$tmp" "${#prompts[@]}" <<'PY'
import json, sys, os
tmp, n_p = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for l in open(os.path.join(tmp, "out")) if l.startswith("{")]
tok = sum(r["n_tokens"] for r in rows)
routed = sum(r["n_routed"] for r in rows)
blocking = sum(r["llm_blocking"] for r in rows)
tbt = sum(r["mean_tbt_ms"] * (r["n_tokens"] - 1) for r in rows) / sum(r["n_tokens"] - 1 for r in rows)
agree = n_routed = 0
for i in range(n_p):
    for l in open(os.path.join(tmp, f"trace.{i}")):
        t = json.loads(l)
        if t["source"] == "llm" and t.get("slm_id") is not None:
            n_routed += 1
            agree += t["slm_id"] == t["id"]
hits = sum(r["lookahead_hits"] for r in rows)
print(f"{100.0 * routed / tok:.1f} {100.0 * blocking / tok:.2f} {tbt:.3f} {agree}/{n_routed} {hits}")
PY
}
printf "%-5s %-6s %-8s %13s %8s %10s %12s %10s %14s\n" rtt tau routed% "loop" "block/100" "TBT ms" "RTT-TBT ms" "cut" "agree@routed"
for tau in 0.16 0.18 0.26; do
  run "$tau" 0 --sync
  read -r _ _ base _ _ <<<"$(summ)"
  for rtt in 50 170; do
    run "$tau" "$rtt" --sync
    read -r pct b_sync tbt_sync agree _ <<<"$(summ)"
    for i in "${!prompts[@]}"; do cp "$tmp/ids.$i" "$tmp/sync.$i"; done
    python3 - "$rtt" "$tau" "$pct" "$b_sync" "$tbt_sync" "$base" "$agree" <<'PY'
import sys
rtt, tau, pct, bs, ts, base, agree = sys.argv[1:]
ts, base = float(ts), float(base)
print(f"{rtt:<5} {tau:<6} {pct:<8} {'--sync':>13} {bs:>8} {ts:>10.2f} {ts - base:>12.2f} {'':>10} {agree:>14}")
PY
    for flags in "" "--lookahead 16"; do
      # shellcheck disable=SC2086
      run "$tau" "$rtt" $flags
      read -r _ b_hide tbt_hide _ hits <<<"$(summ)"
      for i in "${!prompts[@]}"; do cmp -s "$tmp/ids.$i" "$tmp/sync.$i" || echo "OUTPUT DIFFERS for prompt $i" >&2; done
      python3 - "$b_hide" "$tbt_hide" "$base" "$tbt_sync" "$hits" "${flags:-default}" <<'PY'
import sys
bh, th, base, ts, hits, label = sys.argv[1:]
th, base, ts = float(th), float(base), float(ts)
cut = 100.0 * (1 - (th - base) / (ts - base)) if ts > base else 0.0
print(f"{'':<5} {'':<6} {'':<8} {label:>13} {bh:>8} {th:>10.2f} {th - base:>12.2f} {cut:>9.0f}% {'(' + hits + ' la hits)':>14}")
PY
    done
  done
done
