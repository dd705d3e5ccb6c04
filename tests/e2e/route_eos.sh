#!/usr/bin/env bash
# route_eos.sh — the LLM ending the text at a routed position ends the routed generation cleanly through every
# backend, and collect and eval record it. The demo pair's stories end with id 1 (BOS, the next story's start), so
# copies of both models with tokenizer.ggml.eos_token_id 1 are a pair whose greedy decoding reaches its end of
# sequence. From a prompt 40 tokens before the end of the LLM's story, generation in llm mode and at threshold 1
# (every token routed) ends with the LLM's id 1 and equals the embedded backend's through tokroute serve's session
# protocol (--server) and OpenAI endpoint (--openai: serve leaves the end of sequence out of token_ids, finish_reason
# "stop"), the vLLM and SGLang protocol peers (which name it, as vLLM and SGLang do) and a real llama-server
# (--llamacpp and its --openai endpoint). eval's table through serve (--server, --openai) and a round-2 collect (the
# LLM's answer at the position after the generated prefix is its end of sequence) through serve and the peers equal
# the embedded ones; llm-sample through serve's OpenAI endpoint ends a drawn story at the LLM's end of sequence.
# Never skipped: a missing llama.cpp is a failure.
# usage: route_eos.sh CLI SHARED
set -euo pipefail
cli=$1
shared=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
llama_bin=$("$root/scripts/llamacpp.sh" llama-server) || { echo "FAIL: cannot build llama-server" >&2; exit 1; }
source "$root/tests/support/e2e.sh"

# A copy of a model whose end of sequence is id 1.
eos_model() { # src dst
  python3 - "$1" "$2" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
key = b"tokenizer.ggml.eos_token_id"
at = b.find(struct.pack("<Q", len(key)) + key) + 8 + len(key)
assert at > 8 + len(key) and struct.unpack_from("<II", b, at) == (4, 2), "unexpected eos_token_id entry"
struct.pack_into("<I", b, at + 4, 1)
open(sys.argv[2], "wb").write(b)
PY
}
eos_model "$shared/models/stories260K.gguf" "$tmp/llm.gguf"
eos_model "$shared/models/stories-student.gguf" "$tmp/slm.gguf"
llm=$tmp/llm.gguf
slm=$tmp/slm.gguf

# The LLM's story from "Once upon a time" ends with id 1 before 400 tokens; the prompt stops 40 tokens short of it.
story=$("$cli" generate --slm "$slm" --llm "$llm" -p "Once upon a time" -n 400 --mode llm --ids --no-summary 2>/dev/null)
[ "${story##* }" = 1 ] || fail "the LLM's story does not end with its end of sequence: ...${story: -40}"
start=$("$cli" tokenize -m "$llm" --ids "Once upon a time" | tr -s ' ' ',')
ids=($story)
prompt=$start,$(echo "${ids[@]:0:$((${#ids[@]} - 40))}" | tr ' ' ',')
gen() { "$cli" generate --slm "$slm" --tokens "$prompt" -n 100 --ids --no-summary -t 1 "$@" 2>>"$tmp/stderr"; }
declare -A ref
for how in "--mode llm" "--threshold 1"; do
  ref[$how]=$(gen --llm "$llm" $how) || fail "embedded $how: $(tail -3 "$tmp/stderr")"
  [ "$(echo "${ref[$how]}" | wc -w)" -lt 100 ] && [ "${ref[$how]##* }" = 1 ] ||
    fail "embedded $how does not end with the LLM's end of sequence: ${ref[$how]}"
done
[ "$(echo "${ref[--mode llm]}" | wc -w)" = 40 ] || fail "llm mode: $(echo "${ref[--mode llm]}" | wc -w) tokens, not 40"

check() { # name backend url
  local how got
  for how in "--mode llm" "--threshold 1"; do
    got=$(gen "$2" "$3" $how) || fail "$1 $how: $(tail -3 "$tmp/stderr")"
    [ "$got" = "${ref[$how]}" ] || fail "$1 $how: $got != embedded ${ref[$how]}"
  done
  echo "$1: ends with the LLM's end of sequence as embedded"
}

start_serve "$(free_port)" -t 1 --quiet
check "serve (session protocol)" --server "$url"
check "serve (OpenAI endpoint)" --openai "$url"
start_peer vllm "$root/tests/support/vllm_peer.py" "$cli" "$llm"
check "vLLM peer" --openai "$peer_url"
vllm_url=$peer_url
start_peer sglang "$root/tests/support/sglang_peer.py" "$cli" "$llm"
check "SGLang peer" --sglang "$peer_url"
sglang_url=$peer_url
port=$(free_port)
start_llama_server "$port"
check "llama.cpp (/completion)" --llamacpp "http://127.0.0.1:$port"
check "llama.cpp (OpenAI endpoint)" --openai "http://127.0.0.1:$port"

# eval and collect on the story as data, a sentence more after it (the example goes on past the LLM's end): the
# prompt stops 40 tokens short of the story's end.
echo "Once upon a time$("$cli" generate --slm "$slm" --llm "$llm" -p "Once upon a time" -n 400 --mode llm --no-summary \
  2>/dev/null)" >"$tmp/story.txt"
n_story=$("$cli" tokenize -m "$llm" -f "$tmp/story.txt" | wc -l)
echo "Once upon a time, there was a big dog named Max." >>"$tmp/story.txt"
ev() { "$cli" eval --slm "$slm" --data "$tmp/story.txt" --format text --prompt-tokens $((n_story - 40)) --max-new 80 \
  --max-target 400 -t 1 --json "$@" 2>>"$tmp/stderr"; }
ev --llm "$llm" >"$tmp/eval-emb.json" || fail "embedded eval: $(tail -3 "$tmp/stderr")"
for backend in --server --openai; do
  ev "$backend" "$url" >"$tmp/eval.json" || fail "eval $backend: $(tail -3 "$tmp/stderr")"
  python3 - "$tmp/eval-emb.json" "$tmp/eval.json" <<'PY' || fail "eval through $backend differs from the embedded one"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def walk(x, y, path):
    if isinstance(x, dict):
        for k in x:
            if not (k.endswith("_ms") or k.endswith("_s") or "latency" in k or "tokens_per_s" in k):
                walk(x[k], y[k], path + "." + k)
    elif isinstance(x, list):
        assert len(x) == len(y), path
        for i, (p, q) in enumerate(zip(x, y)): walk(p, q, "%s[%d]" % (path, i))
    elif isinstance(x, float):
        if round(x, 3) != round(y, 3): sys.exit("FAIL: %s %r vs %r" % (path, x, y))
    elif x != y:
        sys.exit("FAIL: %s %r vs %r" % (path, x, y))
walk(a, b, "")
PY
done
echo "eval: through --server and --openai equal to the embedded eval"

# Round 2 with every position routed (--tau 1): the LLM's greedy token is each position's reference, the last one
# its end of sequence, after which the example ends.
collect() { "$cli" collect --slm "$slm" --data "$tmp/story.txt" --format text --max-tokens 400 -t 1 "$@" \
  2>>"$tmp/stderr" >/dev/null; }
collect --llm "$llm" --out "$tmp/r1-data" || fail "collect round 1: $(tail -3 "$tmp/stderr")"
"$cli" train-router --data "$tmp/r1-data" --out "$tmp/router.gguf" --epochs 1 --hidden 8 -t 1 >/dev/null 2>&1 ||
  fail "train-router"
round2=(--round 2 --router "$tmp/router.gguf" --tau 1 --prompt-tokens $((n_story - 40)))
collect --llm "$llm" "${round2[@]}" --out "$tmp/r2-emb" || fail "embedded round 2: $(tail -3 "$tmp/stderr")"
python3 - "$tmp/r2-emb" <<'PY' || fail "the embedded round 2 does not end with the LLM's end of sequence"
import struct, sys
b = open(sys.argv[1] + "/positions.bin", "rb").read()
rb = struct.unpack_from("<I", b, 16)[0]
refs = [struct.unpack_from("<i", b, off + 8)[0] for off in range(512, len(b), rb)]
assert refs and refs[-1] == 1 and 1 not in refs[:-1], refs
print("round 2: %d positions, the last one's reference the LLM's end of sequence" % len(refs))
PY
for backend in "--server $url" "--openai $url" "--openai $vllm_url" "--sglang $sglang_url"; do
  out=$tmp/r2-$(echo "$backend" | tr -c 'a-z0-9' _)
  collect $backend "${round2[@]}" --out "$out" || fail "round 2 $backend: $(tail -3 "$tmp/stderr")"
  python3 - "$tmp/r2-emb/positions.bin" "$out/positions.bin" <<'PY' || fail "round 2 $backend differs"
import struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
rb = struct.unpack_from("<I", a, 16)[0]
ra = [a[o:o + rb] for o in range(512, len(a), rb)]
rb_ = [b[o:o + rb] for o in range(512, len(b), rb)]
assert len(ra) == len(rb_), (len(ra), len(rb_))
for x, y in zip(ra, rb_):
    # example, position, reference, SLM top-1, LLM top-1 exactly; the LLM's probabilities within 1e-5
    assert x[:20] == y[:20], (struct.unpack_from("<2I3i", x), struct.unpack_from("<2I3i", y))
    fx, fy = struct.unpack_from("<7f", x, 20), struct.unpack_from("<7f", y, 20)
    assert all(abs(p - q) <= 1e-5 for p, q in zip(fx, fy)), (fx, fy)
PY
done
echo "collect: round 2 through serve (--server, --openai) and the vLLM and SGLang peers equal to the embedded one"

# llm-sample through serve's OpenAI endpoint: a drawn story that reaches the LLM's end of sequence ends there (the
# example is shorter than --max-tokens) instead of failing the collect.
"$cli" collect --slm "$slm" --openai "$url" --format llm-sample --range 0:4 --max-tokens 400 --out "$tmp/sample" -t 1 \
  >/dev/null 2>>"$tmp/stderr" || fail "llm-sample through --openai: $(tail -3 "$tmp/stderr")"
python3 - "$tmp/sample" <<'PY' || fail "llm-sample through --openai: no example ended at the LLM's end of sequence"
import struct, sys
b = open(sys.argv[1] + "/index.bin", "rb").read()
counts = [struct.unpack_from("<2I", b, 8 + 16 * e)[1] for e in range((len(b) - 8) // 16)]
assert len(counts) == 4 and min(counts) < 399, counts
print("llm-sample: examples of %s positions (ended by the LLM's end of sequence where < 399)" % counts)
PY
