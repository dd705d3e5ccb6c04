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

python3 - "$url" <<'PY'
import http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
def nxt(b):
    conn.request("POST", "/v1/route/next", json.dumps(b))
    r = conn.getresponse()
    return r.status, json.loads(r.read())
prompt = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315]
s, r = nxt({"session": "a", "pos": 0, "tokens": prompt})
assert s == 200 and r["pos"] == len(prompt), r
for back in (10, 3):  # a recent position, then one inside the first batch (checkpoint + replay)
    s, r = nxt({"session": "a", "pos": back, "tokens": [17, 500, 261]})
    assert s == 200 and r["pos"] == back + 3, r
    s, ref = nxt({"session": "fresh%d" % back, "pos": 0, "tokens": prompt[:back] + [17, 500, 261]})
    assert s == 200 and ref["token"] == r["token"], (back, r, ref)
s, j = nxt({"session": "c", "pos": 5, "tokens": [5]})
assert s == 409 and j["pos"] == 0, (s, j)
s, r = nxt({"session": "c", "pos": 0, "tokens": prompt[:3] + [17, 500, 261]})
assert s == 200 and r["token"] == ref["token"], (r, ref)
PY
echo "qwen35_route: ok"
