# e2e.sh — what the end-to-end scripts (tests/e2e/*.sh, bench/*.sh) share, sourced after they set $cli (and $llm
# for start_serve): a temporary folder $tmp and the processes in $pids, both cleaned up on exit; fail; a free
# loopback port; waiting for a server; starting `tokroute serve` or a protocol peer; stopping or crashing a process; a routed pair's
# generation checks and the session protocol's rollback checks (the layout e2e scripts: gemma3_route, qwen35_route).
tmp=$(mktemp -d)
pids=()
# Signals a process, or, when it is a `timeout` wrapper, the command it runs — never the wrapper itself: GNU timeout
# follows a forwarded signal with SIGCONT to its child, and a SIGCONT that lands while LeakSanitizer's tracer attaches
# at the child's exit discards the tracer's SIGSTOP; the tracer then waits forever (the ASan suite hung so, 1 run in
# ~100 on a loaded machine: tracer in waitpid, server spinning in sched_yield with SIGTERM pending).
signal_pid() { # signal pid
  local c kids=""
  [ "$(ps -o comm= -p "$2" 2>/dev/null)" = timeout ] && kids=$(pgrep -P "$2" || true)
  if [ -n "$kids" ]; then
    for c in $kids; do kill -"$1" "$c" 2>/dev/null || true; done
  else
    kill -"$1" "$2" 2>/dev/null || true
  fi
}
e2e_cleanup() {
  for p in "${pids[@]}"; do signal_pid TERM "$p"; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap e2e_cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits until URL answers 2xx (at most 30 s) while PID lives; else prints LOG and fails.
wait_http() { # url pid log
  for _ in $(seq 1 300); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { cat "$3" >&2; fail "server exited before answering $1"; }
    sleep 0.1
  done
  fail "no answer from $1"
}

# Starts tokroute serve on $llm at PORT (extra args after it), bounded by `timeout 600`; sets $server_pid (the
# timeout wrapper) and $url (from the ready file).
start_serve() { # port [args...]
  local port=$1
  shift
  rm -f "$tmp/ready"
  timeout 600 "$cli" serve -m "$llm" --host 127.0.0.1 --port "$port" --ready-file "$tmp/ready" "$@" \
    >>"$tmp/serve.log" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  for _ in $(seq 1 600); do
    [ -s "$tmp/ready" ] && { url=$(head -1 "$tmp/ready"); url=${url%/}; return 0; }
    kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/serve.log" >&2; fail "tokroute serve exited"; }
    sleep 0.05
  done
  fail "tokroute serve did not come up"
}
# Starts the cached llama.cpp's llama-server ($llama_bin) on $llm at port $1 (its arguments after), one thread, one
# slot, bounded by `timeout 600`; waits until /health answers; sets $llama_pid and $llama_url.
start_llama_server() { # port [args...]
  local port=$1
  shift
  timeout 600 "$llama_bin/llama-server" -m "$llm" --host 127.0.0.1 --port "$port" -t 1 -c 1024 -np 1 "$@" \
    >>"$tmp/llama-$port.log" 2>&1 &
  llama_pid=$!
  pids+=("$llama_pid")
  wait_http "http://127.0.0.1:$port/health" "$llama_pid" "$tmp/llama-$port.log"
  llama_url=http://127.0.0.1:$port
}
# Starts a protocol peer (tests/support/vllm_peer.py, sglang_peer.py: each prints "PORT PID" first) bounded by
# `timeout 600`; sets $peer_url.
start_peer() { # name script args...
  local name=$1
  shift
  timeout 600 python3 "$@" >"$tmp/$name.out" 2>>"$tmp/$name.log" &
  pids+=("$!")
  for _ in $(seq 1 300); do
    [ -s "$tmp/$name.out" ] && { peer_url=http://127.0.0.1:$(head -1 "$tmp/$name.out" | cut -d' ' -f1); return 0; }
    sleep 0.05
  done
  cat "$tmp/$name.log" >&2
  fail "the $name peer did not start"
}
# Stops a server (SIGTERM, through signal_pid) and waits for it: one that is still there 60 s later fails the test,
# its state shown, rather than hanging the suite.
stop_pid() {
  signal_pid TERM "$1"
  for _ in $(seq 600); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then
    local c
    for c in "$1" $(pgrep -P "$1"); do grep -E '^(Name|State|TracerPid|ShdPnd|SigBlk)' "/proc/$c/status" >&2 || true; done
    for c in $(pgrep -P "$1"); do kill -9 "$c" 2>/dev/null || true; done
    kill -9 "$1" 2>/dev/null || true
    fail "process $1 did not stop within 60 s of SIGTERM"
  fi
  wait "$1" 2>/dev/null || true
}
# A crash: the process dies at once and the kernel closes its connections (a graceful SIGTERM may hold an in-flight
# request open until the client's timeout). $1 is a `timeout` wrapper: the server is its child.
crash_pid() {
  local c
  for c in $(pgrep -P "$1"); do kill -9 "$c" 2>/dev/null || true; done
  wait "$1" 2>/dev/null || true
}

# A routed pair's generation, from the prompt TOKENS (comma-separated ids) for N tokens with maxprob THRESHOLD:
# speculation, drafts and lookahead give --sync's tokens, embedded and through `tokroute serve` on $llm (started
# here and left running: $url), greedy and sampled; something is routed and the speculative runs do roll back.
check_routed_pair() { # slm tokens n threshold
  local common=(--slm "$1" --policy maxprob --threshold "$4" --tokens "$2" -n "$3" --ids -t 1)
  local spec=(--speculate-depth 6 --draft 8 --lookahead 4) samp s
  routed_run() { # name args...
    local name=$1
    shift
    "$cli" generate "${common[@]}" "$@" >"$tmp/$name.ids" 2>"$tmp/$name.err" || { cat "$tmp/$name.err" >&2; fail "$name"; }
  }
  for samp in greedy sampled; do
    s=()
    [ "$samp" = sampled ] && s=(--temp 0.8 --seed 7)
    routed_run "emb_sync_$samp" --llm "$llm" --sync "${s[@]}"
    routed_run "emb_spec_$samp" --llm "$llm" "${spec[@]}" --simulate-rtt 20 "${s[@]}"
    cmp -s "$tmp/emb_sync_$samp.ids" "$tmp/emb_spec_$samp.ids" || fail "embedded $samp: speculation differs from --sync"
    grep -Eq 'routed to the LLM +[1-9]' "$tmp/emb_sync_$samp.err" || fail "embedded $samp: nothing was routed"
    grep -Eq 'discarded [1-9]' "$tmp/emb_spec_$samp.err" || fail "embedded $samp: no speculative token was rolled back"
  done
  start_serve "$(free_port)" --quiet
  for samp in greedy sampled; do
    s=()
    [ "$samp" = sampled ] && s=(--temp 0.8 --seed 7)
    routed_run "srv_sync_$samp" --server "$url" --sync "${s[@]}"
    routed_run "srv_spec_$samp" --server "$url" "${spec[@]}" "${s[@]}"
    cmp -s "$tmp/emb_sync_$samp.ids" "$tmp/srv_sync_$samp.ids" || fail "serve $samp --sync differs from embedded"
    cmp -s "$tmp/emb_sync_$samp.ids" "$tmp/srv_spec_$samp.ids" || fail "serve $samp: speculation differs from --sync"
  done
}

# The session protocol of the server at $url: a session fed PROMPT, rolled back to each pos of BACKS and fed
# [17, 500, 261], answers what a fresh session fed the same ids answers (its TOP top logprobs too; 0: none asked); a
# session asked for a pos it does not hold gets 409 with pos 0 and, resynced from the last of BACKS, the same token.
check_session_rollback() { # prompt(comma-separated ids) backs(comma-separated) top
  python3 - "$url" "$1" "$2" "$3" <<'PY'
import http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
prompt = [int(t) for t in sys.argv[2].split(",")]
backs = [int(b) for b in sys.argv[3].split(",")]
top = int(sys.argv[4])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
def nxt(b):
    if top:
        b["top_logprobs"] = top
    conn.request("POST", "/v1/route/next", json.dumps(b), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())
s, r = nxt({"session": "a", "pos": 0, "tokens": prompt})
assert s == 200 and r["pos"] == len(prompt), r
for back in backs:
    s, r = nxt({"session": "a", "pos": back, "tokens": [17, 500, 261]})
    assert s == 200 and r["pos"] == back + 3, r
    s, ref = nxt({"session": "fresh%d" % back, "pos": 0, "tokens": prompt[:back] + [17, 500, 261]})
    assert s == 200 and ref["token"] == r["token"], (back, r, ref)
    if top:
        assert [t["id"] for t in ref["top_logprobs"]] == [t["id"] for t in r["top_logprobs"]], (r, ref)
        assert all(abs(a["logprob"] - b["logprob"]) < 1e-4 for a, b in zip(r["top_logprobs"], ref["top_logprobs"])), (r, ref)
s, j = nxt({"session": "c", "pos": 5, "tokens": [5]})
assert s == 409 and j["pos"] == 0, (s, j)
s, r = nxt({"session": "c", "pos": 0, "tokens": prompt[:backs[-1]] + [17, 500, 261]})
assert s == 200 and r["token"] == ref["token"], (r, ref)
PY
}
