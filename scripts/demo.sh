#!/usr/bin/env bash
# demo.sh — the main job: a routed generation with the real tiny pair in ../shared/models (the distilled student
# as SLM on the "device", stories260K as LLM), LLM tokens in red, then the latency summary; then the same prompt
# with each model alone, for comparison.
set -euo pipefail
cli=${1:-build/tokroute}
shared=${2:-../shared}
slm="$shared/models/stories-student.gguf"
llm="$shared/models/stories260K.gguf"
prompt="Once upon a time, there was a little dog named Max."
for f in "$slm" "$llm"; do
  [ -f "$f" ] || { echo "demo: missing $f (the shared data folder should sit beside this checkout)" >&2; exit 1; }
done
color=()
[ -t 1 ] || color=(--no-color)

echo "== routed: SLM = stories-student (53K params), LLM = stories260K, maxprob router, tau 0.5 (red = LLM token)"
"$cli" generate --slm "$slm" --llm "$llm" --policy maxprob --threshold 0.5 --mode joint \
  -p "$prompt" -n 96 --echo "${color[@]}" --simulate-rtt 0
echo
echo "== the SLM alone"
"$cli" generate --slm "$slm" -p "$prompt" -n 96 --echo --no-summary
echo "== the LLM alone"
"$cli" generate --slm "$llm" -p "$prompt" -n 96 --echo --no-summary
