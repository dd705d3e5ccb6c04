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

python3 - "$url" <<'PY'
import http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
def nxt(b):
    conn.request("POST", "/v1/route/next", json.dumps(b))
    r = conn.getresponse()
    return r.status, json.loads(r.read())
prompt = [(2 + 37 * i) % 500 + 3 for i in range(80)]  # longer than the LLM's 48-position window
s, r = nxt({"session": "a", "pos": 0, "tokens": prompt})
assert s == 200 and r["pos"] == len(prompt), r
for back in (70, 20):  # past the window, then before it: the same token and top logprobs as a fresh session
    s, r = nxt({"session": "a", "pos": back, "tokens": [17, 500, 261], "top_logprobs": 5})
    assert s == 200 and r["pos"] == back + 3, r
    s, ref = nxt({"session": "fresh%d" % back, "pos": 0, "tokens": prompt[:back] + [17, 500, 261], "top_logprobs": 5})
    assert s == 200 and ref["token"] == r["token"], (back, r, ref)
    assert [t["id"] for t in ref["top_logprobs"]] == [t["id"] for t in r["top_logprobs"]], (r, ref)
    assert all(abs(a["logprob"] - b["logprob"]) < 1e-4 for a, b in zip(r["top_logprobs"], ref["top_logprobs"])), (r, ref)
s, j = nxt({"session": "c", "pos": 5, "tokens": [5]})
assert s == 409 and j["pos"] == 0, (s, j)
s, r = nxt({"session": "c", "pos": 0, "tokens": prompt[:20] + [17, 500, 261]})
assert s == 200 and r["token"] == ref["token"], (r, ref)
PY
echo "gemma3_route: ok"
