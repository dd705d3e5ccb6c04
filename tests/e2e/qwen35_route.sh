#!/usr/bin/env bash
# qwen35_route.sh — a routed pair of two qwen35 models (Gated DeltaNet layers, whose rollback restores checkpoints
# and replays): `tokroute synth`'s qwen3.5-tiny as the SLM and qwen3.5-small as the LLM (same 512-token
# vocabulary, Q8_0). Routed generation with speculation, drafts and lookahead gives --sync's tokens, embedded and
# through `tokroute serve`, greedy and sampled (the speculative runs must actually roll back); the server's session
# protocol on the qwen35 LLM: a rollback to an earlier pos and a 409 resync answer what a fresh session answers.
set -euo pipefail
cli=$1
source "$(dirname "$0")/../support/e2e.sh"
slm=$tmp/slm.gguf
llm=$tmp/llm.gguf
"$cli" synth --shape qwen3.5-tiny --type q8_0 -o "$slm" >/dev/null 2>&1 || fail "synth qwen3.5-tiny"
"$cli" synth --shape qwen3.5-small --type q8_0 -o "$llm" >/dev/null 2>&1 || fail "synth qwen3.5-small"

# maxprob 0.02 routes about a third of the tokens of these random-weight models
check_routed_pair "$slm" 1,403,407,261,378 64 0.02

# rolled back to a recent position, then to one inside the first batch (checkpoint + replay)
check_session_rollback 1,403,407,261,378,432,383,286,261,376,298,315 10,3 0
echo "qwen35_route: ok"
