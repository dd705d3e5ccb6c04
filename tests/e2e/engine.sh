#!/usr/bin/env bash
# engine.sh — the engine through the command line, as a user drives it: help texts, greedy generation and logits
# against the conformance goldens, inspect (text and JSON), synth + bench, and bad inputs that must fail cleanly
# (non-zero exit, a "tokroute:" message on stderr, nothing on stdout).
# Usage: bash engine.sh <tokroute binary> <shared dir>
set -euo pipefail

CLI=${1:?usage: engine.sh <tokroute binary> <shared dir>}
SHARED=${2:?usage: engine.sh <tokroute binary> <shared dir>}
MODEL="$SHARED/models/stories260K.gguf"
GOLDEN="$SHARED/conformance/golden/stories260K.json"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}
pass() { echo "ok   $*"; }
# A sanitizer build reports to stderr; any report is a failure even when the exit status looks right.
no_sanitizer_report() {
    if grep -qE 'ERROR: (Address|Leak|Memory|Thread)Sanitizer|runtime error:' "$TMP/err"; then
        cat "$TMP/err" >&2
        fail "$1: sanitizer report"
    fi
}

# Runs a command that must succeed; stdout in $TMP/out, stderr in $TMP/err.
run_ok() {
    local what=$1 rc=0
    shift
    "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
    if [ "$rc" -ne 0 ]; then
        cat "$TMP/err" >&2
        fail "$what: exit status $rc from: $*"
    fi
    no_sanitizer_report "$what"
}

# Runs a command that must fail cleanly.
run_fails() {
    local what=$1 rc=0
    shift
    "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
    [ "$rc" -ne 0 ] || fail "$what: exited 0 (expected failure)"
    no_sanitizer_report "$what"
    grep -q '^tokroute: ' "$TMP/err" || { cat "$TMP/err" >&2; fail "$what: no 'tokroute:' message on stderr"; }
    [ ! -s "$TMP/out" ] || { cat "$TMP/out" >&2; fail "$what: wrote to stdout"; }
    pass "$what (exit $rc: $(grep -m1 '^tokroute: ' "$TMP/err" | cut -c1-100))"
}

json_get() { # json_get FILE KEY → value (joined with commas for arrays)
    python3 -c 'import json,sys
v = json.load(open(sys.argv[1]))[sys.argv[2]]
print(",".join(map(str, v)) if isinstance(v, list) else v)' "$1" "$2"
}

[ -x "$CLI" ] || fail "no CLI binary at $CLI"
[ -f "$MODEL" ] || fail "no model at $MODEL"

# ---------------------------------------------------------------- help texts
run_ok "--help" "$CLI" --help
grep -q usage "$TMP/out" || fail "--help prints no usage"
for cmd in generate tokenize logits bench inspect synth; do
    run_ok "$cmd --help" "$CLI" "$cmd" --help
    grep -qi usage "$TMP/out" || fail "$cmd --help prints no usage on stdout"
done
pass "--help and every subcommand's --help exit 0 with a usage text"

# ---------------------------------------------------------------- greedy generation = golden tokens
PROMPT=$(json_get "$GOLDEN" prompt_tokens)
GREEDY=$(json_get "$GOLDEN" greedy_tokens | tr ',' ' ')
run_ok "generate --ids" "$CLI" generate -m "$MODEL" --tokens "$PROMPT" -n 32 --ids
GOT=$(tr -s ' \n' ' ' <"$TMP/out" | sed 's/^ //; s/ $//')
[ "$GOT" = "$GREEDY" ] || fail "generate --ids: got '$GOT', expected '$GREEDY'"
pass "generate --ids prints the 32 golden greedy tokens"

# ---------------------------------------------------------------- logits and hidden states = golden
run_ok "logits" "$CLI" logits -m "$MODEL" --tokens "$PROMPT" --logits "$TMP/l.f32" --hidden "$TMP/h.f32"
N=$(echo "$PROMPT" | tr ',' '\n' | wc -l)
[ "$(stat -c %s "$TMP/l.f32")" -eq $((N * 512 * 4)) ] || fail "logits file has $(stat -c %s "$TMP/l.f32") bytes"
[ "$(stat -c %s "$TMP/h.f32")" -eq $((N * 64 * 4)) ] || fail "hidden file has $(stat -c %s "$TMP/h.f32") bytes"
python3 - "$TMP/l.f32" "$SHARED/conformance/golden/stories260K.logits.f32" \
    "$TMP/h.f32" "$SHARED/conformance/golden/stories260K.hidden.f32" <<'EOF' || fail "logits/hidden differ from golden"
import array, math, sys
def load(p):
    a = array.array("f")
    with open(p, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a
for got, ref in ((sys.argv[1], sys.argv[2]), (sys.argv[3], sys.argv[4])):
    a, b = load(got), load(ref)
    assert len(a) == len(b), (got, len(a), len(b))
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    err = math.sqrt(num / den)
    print("     %s: rel RMS %.2e" % (got.rsplit("/", 1)[1], err))
    if not err < 2e-3:
        sys.exit(1)
EOF
pass "logits writes [n][512] logits and [n][64] hidden states matching the golden (rel RMS < 2e-3)"

# ---------------------------------------------------------------- inspect
run_ok "inspect" "$CLI" inspect "$MODEL"
grep -q '^tensors:' "$TMP/out" || fail "inspect: no tensor list"
for t in token_embd.weight output.weight output_norm.weight blk.0.attn_q.weight blk.4.ffn_down.weight; do
    grep -q "^  $t " "$TMP/out" || fail "inspect: tensor $t not listed"
done
[ "$(grep -cE '^  (token_embd|output|output_norm|blk\.[0-9]+\.[a-z_]+)\.weight ' "$TMP/out")" -eq 48 ] ||
    fail "inspect: expected 48 tensor lines"
grep -q 'general.architecture' "$TMP/out" || fail "inspect: metadata not listed"
run_ok "inspect --json" "$CLI" inspect "$MODEL" --json
python3 -m json.tool "$TMP/out" >/dev/null || fail "inspect --json: not valid JSON"
python3 - "$TMP/out" <<'EOF' || fail "inspect --json: wrong content"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["version"] == 3, d["version"]
assert d["metadata"]["general.architecture"] == "llama"
assert len(d["tensors"]) == 48, len(d["tensors"])
t = {x["name"]: x for x in d["tensors"]}
assert t["token_embd.weight"]["shape"] == [64, 512] and t["token_embd.weight"]["type"] == "f32"
assert t["token_embd.weight"]["bytes"] == 64 * 512 * 4
assert d["model"]["n_layer"] == 5 and d["model"]["n_vocab"] == 512
EOF
pass "inspect lists metadata and all 48 tensors; --json is valid JSON with the same content"

# ---------------------------------------------------------------- synth + bench
run_ok "synth" "$CLI" synth --shape tiny --type q8_0 -o "$TMP/tiny.gguf"
[ -s "$TMP/tiny.gguf" ] || fail "synth wrote no file"
[ ! -e "$TMP/tiny.gguf.tmp" ] || fail "synth left its temporary file"
run_ok "bench" "$CLI" bench -m "$TMP/tiny.gguf" --prompt 16 --gen 8 --reps 1 --json
python3 - "$TMP/out" <<'EOF' || fail "bench --json: bad output: $(cat "$TMP/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["prefill_tps"] > 0 and d["decode_tps"] > 0, d
assert d["prompt_tokens"] == 16 and d["gen_tokens"] == 8, d
assert d["type"] == "q8_0", d["type"]
assert d["n_vocab"] > 0 and d["sample_us"] > 0 and d["sample_top_p_us"] > 0 and d["argmax_us"] > 0, d
EOF
pass "synth --shape tiny --type q8_0, then bench --json reports prefill_tps > 0 and sampling µs per token"

# ---------------------------------------------------------------- bad inputs fail cleanly
head -c 5000 "$MODEL" >"$TMP/truncated.gguf"
head -c "$(($(stat -c %s "$MODEL") - 1))" "$MODEL" >"$TMP/short.gguf"
printf 'not a gguf file at all' >"$TMP/garbage.gguf"
run_fails "generate: missing model file" "$CLI" generate -m "$TMP/nope.gguf" --tokens 1,2,3 -n 4 --ids
grep -q "nope.gguf" "$TMP/err" || fail "missing model: message does not name the file"
run_fails "generate: truncated model (5000 bytes)" "$CLI" generate -m "$TMP/truncated.gguf" --tokens 1,2,3 -n 4 --ids
run_fails "generate: model one byte short" "$CLI" generate -m "$TMP/short.gguf" --tokens 1,2,3 -n 4 --ids
run_fails "logits: truncated model" "$CLI" logits -m "$TMP/truncated.gguf" --tokens 1,2 --logits "$TMP/x.f32"
[ ! -e "$TMP/x.f32" ] || fail "logits: wrote an output file for a model it could not load"
run_fails "inspect: not a GGUF file" "$CLI" inspect "$TMP/garbage.gguf"
run_fails "inspect: missing file" "$CLI" inspect "$TMP/nope.gguf"
run_fails "bench: truncated model" "$CLI" bench -m "$TMP/short.gguf" --prompt 4 --gen 2 --reps 1
run_fails "generate: unknown option" "$CLI" generate -m "$MODEL" --tokens 1,2 --bogus-option
run_fails "logits: unknown option" "$CLI" logits --frobnicate
run_fails "bench: unknown option" "$CLI" bench -m "$MODEL" --nope
run_fails "inspect: unknown option" "$CLI" inspect "$MODEL" --nope
run_fails "synth: unknown option" "$CLI" synth --shape tiny --nope
run_fails "unknown command" "$CLI" frobnicate
rc=0
"$CLI" >"$TMP/out" 2>"$TMP/err" || rc=$?
[ "$rc" -ne 0 ] && [ ! -s "$TMP/out" ] && grep -q usage "$TMP/err" || fail "no command: expected usage on stderr only"
pass "no command (exit $rc, usage on stderr)"
run_fails "generate: token id out of range" "$CLI" generate -m "$MODEL" --tokens 1,512 -n 2 --ids
run_fails "generate: bad number" "$CLI" generate -m "$MODEL" --tokens 1,2 -n many --ids

# ---------------------------------------------------------------- text prompt (needs the tokenizer)
run_ok "generate -p" "$CLI" generate -m "$MODEL" -p "Once upon a time" -n 20
case "$(cat "$TMP/out")" in
", there was a little girl named Lily"*) ;;
*) fail "generate -p: got '$(cat "$TMP/out")'" ;;
esac
pass "generate -p 'Once upon a time' continues ', there was a little girl named Lily'"

echo "engine.sh: all checks passed"
