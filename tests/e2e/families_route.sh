#!/usr/bin/env bash
# families_route.sh — routing works for each family added through the architecture interface as for the others: a
# pair from one family (`tokroute synth`'s small SLM and LLM shapes, same 512-token vocabulary, Q8_0) routes
# (embedded and through `tokroute serve`, --sync and speculative with rollbacks giving the same tokens, greedy and
# sampled), the server batches two concurrent routed generations into the same tokens, its sessions roll back to
# what a fresh session answers, and the pair collects routing data, trains a router and generates with it.
#
#   smollm3: smollm3-tiny (SLM) and smollm3-small (LLM), NoPE every fourth layer.
#   lfm2: lfm2-tiny (SLM) and lfm2-small (LLM), short-convolution layers whose windows roll back by checkpoint and
#   replay (the speculative runs roll back on both models).
#   gemma4: gemma4-tiny (SLM) and gemma4-small (LLM): sliding and global layers of different head sizes, KV-shared
#   layers, per-layer inputs.
set -euo pipefail
cli=$1
source "$(dirname "$0")/../support/e2e.sh"

check_family() { # name slm_shape llm_shape threshold
  local name=$1
  slm=$tmp/$name-slm.gguf
  llm=$tmp/$name-llm.gguf
  "$cli" synth --shape "$2" --type q8_0 -o "$slm" >/dev/null 2>&1 || fail "synth $2"
  "$cli" synth --shape "$3" --type q8_0 -o "$llm" >/dev/null 2>&1 || fail "synth $3"
  check_routed_pair "$slm" 1,403,407,261,378 64 "$4"
  # two routed generations at once on the server (batched passes) give what each gives alone
  local common=(--slm "$slm" --policy maxprob --threshold "$4" --tokens 1,403,407,261,378 -n 64 --ids -t 1 --sync)
  "$cli" generate "${common[@]}" --server "$url" >"$tmp/par_greedy.ids" 2>/dev/null &
  local p1=$!
  "$cli" generate "${common[@]}" --server "$url" --temp 0.8 --seed 7 >"$tmp/par_sampled.ids" 2>/dev/null &
  local p2=$!
  wait "$p1" || fail "$name: concurrent greedy run"
  wait "$p2" || fail "$name: concurrent sampled run"
  cmp -s "$tmp/emb_sync_greedy.ids" "$tmp/par_greedy.ids" || fail "$name: concurrent greedy run differs"
  cmp -s "$tmp/emb_sync_sampled.ids" "$tmp/par_sampled.ids" || fail "$name: concurrent sampled run differs"
  check_session_rollback 1,403,407,261,378,432,383,286,261,376,298,315 10,3 5
  stop_pid "$server_pid"
  # collect, train a router, generate with it
  "$cli" collect --slm "$slm" --llm "$llm" --format llm-sample --range 0:4 --max-tokens 48 --out "$tmp/$name-data" \
    -t 1 --json >"$tmp/$name-collect.json" 2>"$tmp/$name-collect.err" || fail "$name: collect: $(cat "$tmp/$name-collect.err")"
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['examples']==4, s" "$tmp/$name-collect.json" \
    || fail "$name: collect summary"
  # (the token_embedding feature is left out: on these random-weight pairs, qwen35's as well, training with it
  # diverges in its first epoch)
  "$cli" train-router --data "$tmp/$name-data" --out "$tmp/$name-router.gguf" --epochs 2 -t 1 \
    --features maxprob,entropy,margin,topk \
    >/dev/null 2>"$tmp/$name-train.err" || fail "$name: train-router: $(cat "$tmp/$name-train.err")"
  "$cli" generate --slm "$slm" --llm "$llm" --router "$tmp/$name-router.gguf" --tokens 1,403,407 -n 16 --ids -t 1 \
    >/dev/null 2>"$tmp/$name-gen.err" || fail "$name: generate with the trained router: $(cat "$tmp/$name-gen.err")"
  echo "$name: ok"
}

check_family smollm3 smollm3-tiny smollm3-small 0.02
check_family lfm2 lfm2-tiny lfm2-small 0.02
check_family gemma4 gemma4-tiny gemma4-small 0.02
echo "families_route: ok"
