#!/usr/bin/env bash
# remote.sh — starts the LLM servers on 127.0.0.1 (tokroute serve when the CLI has it, llama.cpp's llama-server)
# with stories260K and runs bench_remote against them at context 64 and 1024.
# usage: bench/remote.sh [BUILD_DIR] [SHARED_DIR]
set -euo pipefail
build=${1:-build}
shared=${2:-../shared}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$("$root/scripts/llamacpp.sh" llama-server)
llm=$shared/models/stories260K.gguf
pids=()
tmp=$(mktemp -d)
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin/llama-server" -m "$llm" --host 127.0.0.1 --port "$port" -t 1 -c 2048 -np 1 --override-kv llama.context_length=int:2048 >"$tmp/llama.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
if "$build/tokroute" serve --help >/dev/null 2>&1; then
  "$build/tokroute" serve -m "$llm" --port 0 -c 2048 -t 1 --quiet --ready-file "$tmp/ready" >"$tmp/serve.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do [ -s "$tmp/ready" ] && break; sleep 0.1; done
  echo "# tokroute serve (session protocol vs the same server's /v1/completions, whole prefix resent)"
  "$build/bench_remote" --server "$(cat "$tmp/ready")" --openai "$(cat "$tmp/ready")" --ctx 64,1024 --iters 100
fi
echo "# llama.cpp server (whole prefix resent, prefix cache)"
"$build/bench_remote" --llamacpp "http://127.0.0.1:$port" --openai "http://127.0.0.1:$port" --ctx 64,1024 --iters 300
