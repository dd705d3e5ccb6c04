#!/usr/bin/env bash
# hide.sh — what hiding the round trip saves: --sync vs the default for a remote LLM (speculation, draft
# verification, lookahead), embedded LLM with a simulated round trip (--simulate-rtt 50 and 170 ms), routed ≈5/10/20%.
# Per row: blocking round trips per 100 tokens, mean time between tokens (TBT) and its RTT-induced part (TBT minus
# the --sync TBT of the same tau at RTT 0), the cut vs --sync, the SLM/LLM agreement at routed positions (from the
# --sync traces: slm_id == id), routed tokens answered without a call (of them from drafts), and the cost: SLM and
# LLM tokens evaluated per 100 generated tokens (discarded drafts and lookahead included). Every default run's ids are
# compared with --sync's ("OUTPUT DIFFERS" on stderr otherwise).
#
# Pairs: demo (stories-student SLM, stories260K LLM; maxprob tau 0.16/0.18/0.26 ≈ 5/10/20% routed) and synth (random
# weights of real shapes made by `tokroute synth`: qwen2.5-0.5b SLM, qwen2.5-1.5b LLM, q4_k; tau found by
# bisection on the share --sync runs route). Random weights agree by chance only, so the
# synth rows show what speculation and drafting cost and save with real per-token compute, not real agreement.
# Third: llamacpp — the demo pair with the LLM in a real llama.cpp server (--llamacpp; lookahead from its stream).
# usage: bench/hide.sh [BUILD_DIR] [SHARED_DIR] [demo|synth|llamacpp|all] [N_TOKENS]
set -euo pipefail
build=${1:-build}
shared=${2:-../shared}
which=${3:-all}
n_arg=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hide_args=()

run() { # tau rtt flags... → summary lines in $tmp/out, traces in $tmp/trace.N, ids in $tmp/ids.N
  local tau=$1 rtt=$2
  shift 2
  : >"$tmp/out"
  local i=0
  for p in "${prompts[@]}"; do
    "$build/tokroute" generate --slm "$slm" "${llm_args[@]}" -p "$p" --policy maxprob --threshold "$tau" -n "$n" \
      --ignore-eos --ids -t 1 --simulate-rtt "$rtt" --summary-json --trace "$tmp/trace.$i" "$@" >"$tmp/ids.$i" \
      2>>"$tmp/out"
    i=$((i + 1))
  done
}
summ() { # → "routed% blocking/100 tbt agree hits draft_hits slm/100 llm/100"
  python3 - "$tmp" "${#prompts[@]}" <<'PY'
import json, sys, os
tmp, n_p = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for l in open(os.path.join(tmp, "out")) if l.startswith("{")]
s = lambda k: sum(r[k] for r in rows)
tok = s("n_tokens")
tbt = sum(r["mean_tbt_ms"] * (r["n_tokens"] - 1) for r in rows) / sum(r["n_tokens"] - 1 for r in rows)
agree = n_routed = 0
for i in range(n_p):
    for l in open(os.path.join(tmp, f"trace.{i}")):
        t = json.loads(l)
        if t["source"] == "llm" and t.get("slm_id") is not None:
            n_routed += 1
            agree += t["slm_id"] == t["id"]
print(f"{100.0 * s('n_routed') / tok:.1f} {100.0 * s('llm_blocking') / tok:.2f} {tbt:.3f} {agree}/{n_routed} "
      f"{s('lookahead_hits')} {s('draft_hits')} {100.0 * s('slm_evaluated') / tok:.0f} "
      f"{100.0 * s('llm_evaluated') / tok:.0f}")
PY
}
header() {
  printf "%-6s %-4s %-9s %-7s %-8s %9s %9s %11s %6s %12s %11s %9s\n" pair rtt tau routed% loop block/100 "TBT ms" \
    "RTT-TBT ms" cut agree@routed "hits(dr)" slm/llm
}
bench_pair() { # name taus...
  local name=$1
  shift
  for tau in "$@"; do
    run "$tau" 0 --sync
    read -r _ _ base _ <<<"$(summ)"
    for rtt in 50 170; do
      run "$tau" "$rtt" --sync
      read -r pct b_sync tbt_sync agree _ _ slm_s llm_s <<<"$(summ)"
      for i in "${!prompts[@]}"; do cp "$tmp/ids.$i" "$tmp/sync.$i"; done
      printf "%-6s %-4s %-9s %-7s %-8s %9s %9.2f %11.2f %6s %12s %11s %9s\n" "$name" "$rtt" "$tau" "$pct" --sync \
        "$b_sync" "$tbt_sync" "$(python3 -c "print(f'{$tbt_sync - $base:.2f}')")" "" "$agree" "" "$slm_s/$llm_s"
      run "$tau" "$rtt" "${hide_args[@]}"
      read -r _ b_hide tbt_hide _ hits dhits slm_h llm_h <<<"$(summ)"
      for i in "${!prompts[@]}"; do cmp -s "$tmp/ids.$i" "$tmp/sync.$i" || echo "OUTPUT DIFFERS: $name tau $tau rtt $rtt prompt $i" >&2; done
      python3 - "$b_hide" "$tbt_hide" "$base" "$tbt_sync" "$hits($dhits)" "$slm_h/$llm_h" <<'PY'
import sys
bh, th, base, ts, hits, cost = sys.argv[1:]
th, base, ts = float(th), float(base), float(ts)
cut = 100.0 * (1 - (th - base) / (ts - base)) if ts > base else 0.0
print(f"{'':<6} {'':<4} {'':<9} {'':<7} {'default':<8} {bh:>9} {th:>9.2f} {th - base:>11.2f} {cut:>5.0f}% {'':>12} {hits:>11} {cost:>9}")
PY
    done
  done
}

header
if [ "$which" = demo ] || [ "$which" = all ]; then
  slm=$shared/models/stories-student.gguf
  llm=$shared/models/stories260K.gguf
  n=${n_arg:-128}
  prompts=("Once upon a time" "Tom and his dog went to the park." "The little bird" "Lily wanted to")
  llm_args=(--llm "$llm")
  bench_pair demo 0.16 0.18 0.26
fi
if [ "$which" = llamacpp ] || [ "$which" = all ]; then
  # The demo pair with the LLM in a real llama.cpp server on loopback (scripts/llamacpp.sh builds it once), reached
  # with --llamacpp: its lookahead comes from llama.cpp's own stream; it verifies no drafts.
  slm=$shared/models/stories-student.gguf
  n=${n_arg:-128}
  prompts=("Once upon a time" "Tom and his dog went to the park." "The little bird" "Lily wanted to")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$("$(dirname "$0")/../scripts/llamacpp.sh" llama-server)/llama-server" -m "$shared/models/stories260K.gguf" \
    --host 127.0.0.1 --port "$port" -t 1 -c 2048 -np 1 >"$tmp/llama.log" 2>&1 &
  llama_pid=$!
  trap 'kill $llama_pid 2>/dev/null; rm -rf "$tmp"' EXIT
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.1; done
  llm_args=(--llamacpp "http://127.0.0.1:$port")
  hide_args=(--lookahead 8) # opt-in through llama.cpp (its rounding can break a near-tie otherwise than --sync)
  bench_pair llama 0.16 0.18 0.26
fi
if [ "$which" = synth ] || [ "$which" = all ]; then
  dir=${TR_SYNTH_DIR:-$tmp}
  slm=$dir/synth-qwen2.5-0.5b-q4_k.gguf
  llm=$dir/synth-qwen2.5-1.5b-q4_k.gguf
  [ -s "$slm" ] || "$build/tokroute" synth --shape qwen2.5-0.5b --type q4_k -o "$slm" >/dev/null 2>&1
  [ -s "$llm" ] || "$build/tokroute" synth --shape qwen2.5-1.5b --type q4_k --seed 2 -o "$llm" >/dev/null 2>&1
  n=${n_arg:-48}
  prompts=("Once upon a time" "The little bird")
  llm_args=(--llm "$llm")
  # tau for a routed share: bisection between the lowest and highest SLM score of an unrouted run, on the share
  # that --sync runs at RTT 0 route (routing changes the text and so the scores), until within 1.5 points (at most
  # 8 runs per share).
  share() { # → fraction of routed tokens in the traces in $tmp
    python3 - "$tmp" "${#prompts[@]}" <<'PY'
import json, sys, os
rows = [json.loads(l) for i in range(int(sys.argv[2])) for l in open(os.path.join(sys.argv[1], f"trace.{i}"))]
print(sum(r["source"] == "llm" for r in rows) / len(rows))
PY
  }
  run 0 0 --sync
  read -r lo hi <<<"$(python3 - "$tmp" "${#prompts[@]}" <<'PY'
import json, sys, os
s = [json.loads(l)["score"] for i in range(int(sys.argv[2])) for l in open(os.path.join(sys.argv[1], f"trace.{i}"))]
print(min(s), max(s))
PY
)"
  taus=()
  for q in 0.05 0.10 0.20; do
    a=$lo b=$hi tau=$lo
    for _ in 1 2 3 4 5 6 7 8; do
      tau=$(python3 -c "print(f'{($a + $b) / 2:.9g}')")
      run "$tau" 0 --sync
      got=$(share)
      python3 -c "import sys; sys.exit(abs($got - $q) > 0.015)" && break
      if python3 -c "import sys; sys.exit(not $got < $q)"; then a=$tau; else b=$tau; fi
    done
    taus+=("$tau")
  done
  bench_pair synth "${taus[@]}"
fi
