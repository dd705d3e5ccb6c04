#!/usr/bin/env bash
# train_remote.sh — collect and eval with the LLM behind every backend give the embedded LLM's data (issue 18):
# real `tokroute serve` (--server and --openai: its vLLM-shaped prompt_logprobs), the real llama.cpp server
# (--llamacpp: one request per position), and the vLLM and SGLang protocol peers (tests/support/*_peer.py; vLLM and
# SGLang themselves need GPUs and Python packages this machine does not have), each compared field by field with
# the embedded collect of the demo pair; round 2 and llm-sample through tokroute serve; eval's table through a
# backend equal to the embedded one to the third decimal; tokroute serve killed mid-collect → a clear stop, and the
# rerun resumes into data equal to an uninterrupted collect. Servers on 127.0.0.1, free ports, bounded in time.
# Never skipped: a missing llama.cpp is a failure.
# usage: train_remote.sh CLI SHARED
set -euo pipefail
cli=$1
shared=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
llama_bin=$("$root/scripts/llamacpp.sh" llama-server) || { echo "FAIL: cannot build llama-server" >&2; exit 1; }
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
stories=$shared/data/tinystories/tinystories_val.txt
source "$root/tests/support/e2e.sh"
collect() { "$cli" collect --slm "$slm" --data "$stories" --format text -t 1 "$@" 2>>"$tmp/stderr" >/dev/null; }

# Field-by-field comparison of two collect folders (docs/train.md's record layout): same positions and
# references; SLM fields bit-identical (the SLM runs here in both); the LLM's top-1 identical except where its
# two best log-probabilities are within TIE of each other; its probabilities within TOL.
compare() { # a b tol tie
  python3 - "$1" "$2" "$3" "$4" <<'EOF'
import struct, sys, math
def load(d):
    b = open(d + "/positions.bin", "rb").read()
    rb, ne, nv, tk = struct.unpack_from("<4I", b, 16)
    out = []
    for off in range(512, len(b), rb):
        ex, pos, truth, s1, l1 = struct.unpack_from("<2I3i", b, off)
        f = struct.unpack_from("<7f", b, off + 20)
        roll = struct.unpack_from("<2i", b, off + 48)
        lps, slp = struct.unpack_from("<2f", b, off + 56)
        rest = b[off + 64: off + rb]
        out.append((ex, pos, truth, s1, l1, f, roll, lps, slp, rest))
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
tol, tie = float(sys.argv[3]), float(sys.argv[4])
if len(a) != len(b): sys.exit("FAIL: %d positions vs %d" % (len(a), len(b)))
if not a: sys.exit("FAIL: no positions")
top1_diff = worst = 0
for x, y in zip(a, b):
    if x[:4] != y[:4]: sys.exit("FAIL: example/position/reference/SLM top-1 differ at %s vs %s" % (x[:4], y[:4]))
    if x[9] != y[9] or x[5][0] != y[5][0] or x[5][2] != y[5][2] or x[5][4:] != y[5][4:]:
        sys.exit("FAIL: SLM fields differ at example %d position %d" % x[:2])
    if x[4] != y[4]:
        # a near-tie: the two top-1 tokens' probabilities under either LLM run are within tie (in log space)
        p1, p2 = x[5][1], y[5][1]
        if abs(math.log(max(p1, 1e-30)) - math.log(max(p2, 1e-30))) > tie:
            sys.exit("FAIL: LLM top-1 %d vs %d at example %d position %d (p %.6f vs %.6f)" % (x[4], y[4], x[0], x[1], p1, p2))
        top1_diff += 1
        continue
    for i in (1, 3):
        worst = max(worst, abs(x[5][i] - y[5][i]))
    worst = max(worst, abs(x[7] - y[7]), abs(x[8] - y[8]))
if worst > tol: sys.exit("FAIL: LLM probabilities differ by %.3g > %g" % (worst, tol))
print("%d positions equal (LLM probabilities within %.2g; %d top-1 near-ties)" % (len(a), worst, top1_diff))
EOF
}

# The embedded reference.
collect --llm "$llm" --range 0:24 --out "$tmp/emb"
collect --llm "$llm" --range 0:24 --llm-topk 5 --out "$tmp/emb5"

# 1. tokroute serve, through its session backend and through the OpenAI-compatible one (one request per example).
port=$(free_port)
start_serve "$port" -t 1
collect --server "$url" --range 0:24 --out "$tmp/srv" --json
compare "$tmp/emb" "$tmp/srv" 1e-5 1e-3 || fail "--server collect differs from the embedded one"
collect --openai "$url" --range 0:24 --llm-topk 5 --out "$tmp/oai"
compare "$tmp/emb5" "$tmp/oai" 1e-5 1e-3 || fail "--openai collect differs from the embedded one"
# A folder collected through another backend is not resumed, and the message names the LLMs (not library wording).
collect --server "$url" --range 0:24 --llm-topk 5 --out "$tmp/oai" && fail "resumed a folder collected through --openai"
grep -q "cannot be resumed: the LLM: 'openai' there, 'server' here" "$tmp/stderr" ||
  fail "unclear resume error: $(tail -1 "$tmp/stderr")"
out=$("$cli" collect --slm "$slm" --server "$url" --data "$stories" --format text --range 24:28 --out "$tmp/srv2" \
  --json 2>/dev/null)
echo "$out" | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["llm_requests"] == 4, j' \
  || fail "one scoring request per example expected: $out"

# A router trained on the remotely collected data is the one trained on the embedded data (training is
# deterministic for a seed, and the data are equal).
"$cli" train-router --data "$tmp/emb" --out "$tmp/r1.gguf" --epochs 2 --hidden 16 -t 1 >/dev/null 2>&1 \
  || fail "train-router"
"$cli" train-router --data "$tmp/srv" --out "$tmp/r1-srv.gguf" --epochs 2 --hidden 16 -t 1 >/dev/null 2>&1 \
  || fail "train-router on --server data"
cmp -s "$tmp/r1.gguf" "$tmp/r1-srv.gguf" || fail "routers trained on embedded and --server data differ"

# Round 2 (a router generates the prefix; the LLM answers the position after it) and llm-sample through the server.
collect --llm "$llm" --range 0:6 --round 2 --router "$tmp/r1.gguf" --out "$tmp/emb-r2"
collect --server "$url" --range 0:6 --round 2 --router "$tmp/r1.gguf" --out "$tmp/srv-r2"
compare "$tmp/emb-r2" "$tmp/srv-r2" 1e-5 1e-3 || fail "round 2 through --server differs"
# llm-sample through the server: seeded draws (the server's own draw from (seed, position), not the embedded
# backend's, so the texts differ from an embedded collect's), reproducible, every sampled token possible under the LLM.
for run in 1 2; do
  "$cli" collect --slm "$slm" --server "$url" --format llm-sample --range 0:6 --max-tokens 64 --out "$tmp/srv-s$run" \
    -t 1 2>>"$tmp/stderr" >/dev/null || fail "llm-sample through --server"
done
cmp -s "$tmp/srv-s1/positions.bin" "$tmp/srv-s2/positions.bin" || fail "llm-sample through --server is not reproducible"
python3 - "$tmp/srv-s1" <<'EOF' || fail "llm-sample through --server: bad data"
import struct, sys
b = open(sys.argv[1] + "/positions.bin", "rb").read()
rb = struct.unpack_from("<I", b, 16)[0]
n = (len(b) - 512) // rb
assert n > 100, n
for off in range(512, len(b), rb):
    p_truth = struct.unpack_from("<f", b, off + 32)[0]  # llm_p_truth: the LLM's probability of the sampled token
    assert 0 < p_truth <= 1, p_truth
print("llm-sample: %d positions, every sampled token possible under the LLM" % n)
EOF

# 2. eval: the table through the server equals the embedded one to the third decimal (generation included).
ev() { "$cli" eval --slm "$slm" --data "$stories" --format text --range 800:812 --max-new 24 -t 1 --json "$@" \
  2>>"$tmp/stderr"; }
ev --llm "$llm" >"$tmp/eval-emb.json"
ev --server "$url" >"$tmp/eval-srv.json"
python3 - "$tmp/eval-emb.json" "$tmp/eval-srv.json" <<'EOF' || fail "eval through --server differs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
n = 0
def walk(x, y, path):
    global n
    if isinstance(x, dict):
        for k in x:
            if k.endswith("_ms") or k.endswith("_s") or "latency" in k or "tokens_per_s" in k: continue
            walk(x[k], y[k], path + "." + k)
    elif isinstance(x, list):
        assert len(x) == len(y), path
        for i, (p, q) in enumerate(zip(x, y)): walk(p, q, "%s[%d]" % (path, i))
    elif isinstance(x, float):
        if round(x, 3) != round(y, 3): sys.exit("FAIL: %s %r vs %r" % (path, x, y))
        n += 1
    else:
        if x != y: sys.exit("FAIL: %s %r vs %r" % (path, x, y))
walk(a, b, "")
print("eval: %d numbers equal to the third decimal" % n)
EOF

# 3. The server killed mid-collect: a clear stop with what was collected kept; the rerun resumes to the same data.
"$cli" collect --slm "$slm" --server "$url" --data "$stories" --format text --range 0:24 --out "$tmp/cut" -t 1 \
  --timeout-ms 2000 --retries 1 >/dev/null 2>"$tmp/cut.err" &
cpid=$!
for _ in $(seq 1 200); do
  [ -f "$tmp/cut/index.bin" ] && [ "$(stat -c %s "$tmp/cut/index.bin")" -ge $((8 + 16 * 3)) ] && break
  sleep 0.02
done
crash_pid "$server_pid"
if wait "$cpid"; then
  # the collect may have finished before the crash on a fast machine: then there is nothing to resume
  echo "collect finished before the server was killed"
else
  grep -q "a rerun resumes there" "$tmp/cut.err" || fail "no clear stop: $(cat "$tmp/cut.err")"
  echo "killed mid-collect: $(grep -o 'collected so far: [0-9]* examples' "$tmp/cut.err")"
fi
start_serve "$(free_port)" -t 1
collect --server "$url" --range 0:24 --out "$tmp/cut"
compare "$tmp/emb" "$tmp/cut" 1e-5 1e-3 || fail "a resumed collect differs from an uninterrupted one"
crash_pid "$server_pid"
"$cli" collect --slm "$slm" --server "$url" --data "$stories" --format text --range 0:2 --out "$tmp/dead" -t 1 \
  --timeout-ms 500 --retries 0 >/dev/null 2>"$tmp/dead.err" && fail "collect against a dead server succeeded"
grep -q "LLM backend" "$tmp/dead.err" || fail "unclear error: $(cat "$tmp/dead.err")"

# 4. llama.cpp's server: one /completion per position (no prompt log-probabilities there).
port=$(free_port)
start_llama_server "$port"
collect --llamacpp "http://127.0.0.1:$port" --range 0:6 --out "$tmp/llama"
collect --llm "$llm" --range 0:6 --out "$tmp/emb6"
# llama.cpp's numerics: its log-probabilities drift from ours by up to ~0.02 at later positions of a 256-token story
# (its own kernels and attention; an f32 KV cache does not change it), so probabilities within 0.01 and the top-1
# may differ only where the two best are within 0.06 in log-probability.
compare "$tmp/emb6" "$tmp/llama" 1e-2 6e-2 || fail "--llamacpp collect differs from the embedded one"

# 5. The vLLM and SGLang protocol peers (real values from this build's `tokroute logits`; start_peer: e2e.sh).
start_peer vllm "$root/tests/support/vllm_peer.py" "$cli" "$llm"
collect --openai "$peer_url" --range 0:6 --out "$tmp/vllm"
compare "$tmp/emb6" "$tmp/vllm" 1e-5 1e-3 || fail "--openai (vLLM peer) collect differs from the embedded one"
# above vLLM's default --max-logprobs 20 the peer answers vLLM's error, and the message says which flag raises it
collect --openai "$peer_url" --range 0:1 --llm-topk 32 --out "$tmp/vllm32" && fail "K = 32 passed vLLM's limit"
grep -q -- "--max-logprobs" "$tmp/stderr" || fail "the vLLM limit error does not name --max-logprobs"
start_peer sglang "$root/tests/support/sglang_peer.py" "$cli" "$llm"
collect --sglang "$peer_url" --range 0:6 --out "$tmp/sglang"
compare "$tmp/emb6" "$tmp/sglang" 1e-5 1e-3 || fail "--sglang (SGLang peer) collect differs from the embedded one"
echo "train_remote: all backends give the embedded collect's data"
