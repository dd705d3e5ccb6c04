#!/usr/bin/env bash
# kv_q8.sh — `--kv-type` as a user meets it: a routed generation of the demo pair with Q8_0 caches (SLM and embedded
# LLM) gives the same tokens as F16 on a prompt without near ties; a bad or missing value is a usage error (exit 2)
# that names the choices; `bench` reports the smaller cache; `serve --kv-type q8_0` holds sessions at Q8_0's size in
# /metrics' KV bytes, and its rollback and 409 resync give the tokens a fresh session gives.
set -euo pipefail
cli=$1
shared=$2
slm=$shared/models/stories-student.gguf
llm=$shared/models/stories260K.gguf
source "$(dirname "$0")/../support/e2e.sh"

# --- generate: q8_0 against f16, routed (maxprob, tau 0.5 as scripts/demo.sh), 64 tokens.
for kv in f16 q8_0; do
  "$cli" generate --slm "$slm" --llm "$llm" --policy maxprob --threshold 0.5 --mode joint -p "Once upon a time" \
    -n 64 --ignore-eos --ids --no-summary --kv-type "$kv" >"$tmp/gen_$kv.txt" 2>"$tmp/gen_$kv.err" ||
    { cat "$tmp/gen_$kv.err" >&2; fail "generate --kv-type $kv failed"; }
done
n=$(tr -s ' ,\n' '\n' <"$tmp/gen_q8_0.txt" | grep -c '^[0-9]')
[ "$n" -eq 64 ] || fail "generate --kv-type q8_0 gave $n ids, not 64"
cmp -s "$tmp/gen_f16.txt" "$tmp/gen_q8_0.txt" || fail "q8_0 and f16 caches generate different tokens"

# --- usage errors: exit 2, one line naming the choices, nothing on stdout.
for args in "--kv-type bogus" "--kv-type=q4_0" "--kv-type"; do
  set +e
  # shellcheck disable=SC2086
  "$cli" generate --slm "$slm" -p "Once" -n 4 $args >"$tmp/bad.out" 2>"$tmp/bad.err"
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "generate $args: exit $rc, not 2"
  grep -q -- "--kv-type" "$tmp/bad.err" && grep -q "q8_0" "$tmp/bad.err" || fail "generate $args: $(cat "$tmp/bad.err")"
  [ ! -s "$tmp/bad.out" ] || fail "generate $args printed to stdout"
done
set +e
"$cli" serve -m "$llm" --kv-type q9 >/dev/null 2>"$tmp/bad.err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "serve --kv-type q9: exit $rc"

# --- bench: the KV cache it reports is Q8_0's size (8-wide heads: blocks of 8 and a scale, 10 bytes for F16's 16).
for kv in f16 q8_0; do
  "$cli" bench -m "$llm" --kv-type "$kv" --prompt 16 --gen 8 --depth 100 --reps 1 --json >"$tmp/bench_$kv.json"
done
python3 - "$tmp/bench_f16.json" "$tmp/bench_q8_0.json" <<'PY'
import json, sys
f16, q8 = (json.load(open(p)) for p in sys.argv[1:])
assert f16["kv_type"] == "f16" and q8["kv_type"] == "q8_0", (f16, q8)
assert q8["depth"] == 100 and q8["decode_tps"] > 0, q8
assert abs(q8["kv_cache_mib"] / f16["kv_cache_mib"] - 10 / 16) < 1e-9, (f16["kv_cache_mib"], q8["kv_cache_mib"])
PY

# --- serve: a session's KV bytes at Q8_0's size; rollback and resync exact.
for kv in f16 q8_0; do
  start_serve "$(free_port)" --kv-type "$kv" --quiet
  python3 - "$url" "$kv" <<'PY'
import http.client, json, sys, urllib.parse
url, kv = urllib.parse.urlparse(sys.argv[1]), sys.argv[2]
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=20)
def nxt(b):
    conn.request("POST", "/v1/route/next", json.dumps(b), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())
prompt = [1, 403, 407, 261, 378, 432, 383]
s, r = nxt({"session": "a", "pos": 0, "tokens": prompt})
assert s == 200 and r["pos"] == 7, r
conn.request("GET", "/metrics")
m = conn.getresponse().read().decode()
kv_bytes = int([l for l in m.splitlines() if l.startswith("tokroute_kv_bytes")][0].split()[1])
# One session of 64 positions (the first capacity) in stories260K: 5 layers x 4 KV heads x (K, V) x row bytes
# (F16: 8 x 2; Q8_0: 8 values + an F16 scale), plus the 64 token ids.
row = 16 if kv == "f16" else 10
assert kv_bytes == 5 * 4 * 2 * 64 * row + 64 * 4, (kv, kv_bytes)
# Rollback to 3, another continuation; then a 409 and the resync; each equals a fresh session's answer.
s, r = nxt({"session": "a", "pos": 3, "tokens": [17, 500, 261]})
assert s == 200 and r["pos"] == 6, r
s, ref = nxt({"session": "b", "pos": 0, "tokens": prompt[:3] + [17, 500, 261]})
assert s == 200 and ref["token"] == r["token"], (r, ref)
s, j = nxt({"session": "c", "pos": 5, "tokens": [5]})
assert s == 409 and j["pos"] == 0, (s, j)
s, r = nxt({"session": "c", "pos": 0, "tokens": prompt[:3] + [17, 500, 261]})
assert s == 200 and r["token"] == ref["token"], (r, ref)
print(kv, "session bytes", kv_bytes)
PY
  stop_pid "$server_pid"
done
echo "kv_q8: ok"
