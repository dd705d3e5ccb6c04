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
common=(--slm "$slm" --policy maxprob --threshold 0.2 --tokens 2,403,407,261,378 -n 96 --ids -t 1)
spec=(--speculate-depth 6 --draft 8 --lookahead 4)
run() { # name args...
  local name=$1
  shift
  "$cli" generate "${common[@]}" "$@" >"$tmp/$name.ids" 2>"$tmp/$name.err" || { cat "$tmp/$name.err" >&2; fail "$name"; }
}
for samp in greedy sampled; do
  s=()
  [ "$samp" = sampled ] && s=(--temp 0.8 --seed 7)
  run "emb_sync_$samp" --llm "$llm" --sync "${s[@]}"
  run "emb_spec_$samp" --llm "$llm" "${spec[@]}" --simulate-rtt 20 "${s[@]}"
  cmp -s "$tmp/emb_sync_$samp.ids" "$tmp/emb_spec_$samp.ids" || fail "embedded $samp: speculation differs from --sync"
  grep -Eq 'routed to the LLM +[1-9]' "$tmp/emb_sync_$samp.err" || fail "embedded $samp: nothing was routed"
  grep -Eq 'discarded [1-9]' "$tmp/emb_spec_$samp.err" || fail "embedded $samp: no speculative token was rolled back"
done

start_serve "$(free_port)" --quiet
for samp in greedy sampled; do
  s=()
  [ "$samp" = sampled ] && s=(--temp 0.8 --seed 7)
  run "srv_sync_$samp" --server "$url" --sync "${s[@]}"
  run "srv_spec_$samp" --server "$url" "${spec[@]}" "${s[@]}"
  cmp -s "$tmp/emb_sync_$samp.ids" "$tmp/srv_sync_$samp.ids" || fail "serve $samp --sync differs from embedded"
  cmp -s "$tmp/emb_sync_$samp.ids" "$tmp/srv_spec_$samp.ids" || fail "serve $samp: speculation differs from --sync"
done

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
