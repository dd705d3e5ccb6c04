#!/usr/bin/env bash
# gemma3_route.sh — a routed pair of two gemma3 models whose sliding windows the runs cross: `tokroute synth`'s
# gemma3-tiny as the SLM (window 32) and gemma3-small as the LLM (window 48, GQA 6:2), same 512-token vocabulary,
# Q8_0, 5 prompt tokens + 96 generated. Routed generation with speculation, drafts and lookahead gives --sync's
# tokens, embedded and through `tokroute serve`, greedy and sampled (the speculative runs must actually roll back);
# the server's session protocol on the gemma3 LLM: a rollback to an earlier pos (before and past the window) and a
# 409 resync answer what a fresh session answers.
set -euo pipefail
cli=$1
source "$(dirname "$0")/../support/e2e.sh"
slm=$tmp/slm.gguf
llm=$tmp/llm.gguf
"$cli" synth --shape gemma3-tiny --type q8_0 -o "$slm" >/dev/null 2>&1 || fail "synth gemma3-tiny"
"$cli" synth --shape gemma3-small --type q8_0 -o "$llm" >/dev/null 2>&1 || fail "synth gemma3-small"

# maxprob 0.2 routes about a third of the tokens of these random-weight models
check_routed_pair "$slm" 2,403,407,261,378 96 0.2

# a prompt longer than the LLM's 48-position window; rolled back past the window, then before it
prompt=$(python3 -c 'print(",".join(str((2 + 37 * i) % 500 + 3) for i in range(80)))')
check_session_rollback "$prompt" 70,20 5
echo "gemma3_route: ok"
