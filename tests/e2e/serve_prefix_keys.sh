#!/usr/bin/env bash
# serve_prefix_keys.sh — the completion prefix cache of a real `tokroute serve` with two API keys is per key: key A
# completes a text; key B's request for the same text and more reports cached_tokens 0 (B learns nothing of A's
# prompt and generated text from it) and gives what a fresh server gives, while A's own such request still starts
# from A's cache, and B's repeat from B's. A server without keys is one owner: its clients share the cache.
# usage: serve_prefix_keys.sh CLI SHARED
set -euo pipefail
cli=$1
shared=$2
llm=$shared/models/stories260K.gguf
source "$(dirname "$0")/../support/e2e.sh"

# Prints "cached_tokens token_ids..." of each completion: KEY PROMPT, one per argument pair, greedy, 8 tokens.
complete() { # url key prompt [key prompt ...]
  python3 - "$@" <<'PY'
import http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
args = sys.argv[2:]
for key, prompt in zip(args[0::2], args[1::2]):
    headers = {"Content-Type": "application/json"}
    if key != "-":
        headers["Authorization"] = "Bearer " + key
    conn.request("POST", "/v1/completions", json.dumps(
        {"prompt": prompt, "max_tokens": 8, "temperature": 0, "return_token_ids": True}), headers)
    r = conn.getresponse()
    body = r.read().decode()
    if r.status != 200:
        sys.exit(f"{r.status}: {body}")
    j = json.loads(body)
    print(j["usage"]["prompt_tokens_details"]["cached_tokens"], *j["choices"][0]["token_ids"])
PY
}

secret="Lily told Tom the secret password 4711 and"
start_serve "$(free_port)" --api-key key-a --api-key key-b -c 256 -t 1 --quiet
complete "$url" key-a "$secret" key-b "$secret she" key-a "$secret she" key-b "$secret she" >"$tmp/keys"
{ read -r a1 _; read -r b1 b1_ids; read -r a2 _; read -r b2 b2_ids; } <"$tmp/keys"
[ "$a1" = 0 ] || fail "key A's first completion reports $a1 cached tokens on a fresh server"
[ "$b1" = 0 ] || fail "key B reused key A's cached prefix: cached_tokens $b1 (B learns how much of A's text it guessed)"
[ "$a2" -gt 0 ] || fail "key A's own repeat did not reuse its cache: cached_tokens $a2"
[ "$b2" -gt 0 ] || fail "key B's own repeat did not reuse its cache: cached_tokens $b2"
[ "$b1_ids" = "$b2_ids" ] || fail "key B: reused and fresh completions differ ($b1_ids / $b2_ids)"
stop_pid "$server_pid"

start_serve "$(free_port)" -c 256 -t 1 --quiet
complete "$url" - "$secret" - "$secret she" >"$tmp/nokey"
{ read -r n1 _; read -r n2 n2_ids; } <"$tmp/nokey"
[ "$n1" = 0 ] && [ "$n2" -gt 0 ] || fail "no keys: one owner, the second request reuses the first's prefix ($n1, $n2)"
[ "$n2_ids" = "$b1_ids" ] || fail "no keys: the reused completion differs from key B's fresh one"
echo "prefix cache per key: A's repeat reused $a2, B's first 0 (B's repeat $b2); no keys: $n2 shared"
