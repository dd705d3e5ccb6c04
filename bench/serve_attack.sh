#!/usr/bin/env bash
# serve_attack.sh — `tokroute serve` under hostile load (numbers for the README and issue 20, not a test): 8 honest
# session-protocol clients (serve_load, one keep-alive connection each, tokens checked against the model) first
# alone, then while attackers from other loopback addresses (127.0.0.2-127.0.0.41: per-address limits apply to
# them, not to the honest 127.0.0.1) hold ~1,100 idle connections, keep 64 connections sending half a header a
# byte at a time (slowloris), and 32 clients post 1 MiB token arrays in a loop (to /v1/route/next and as a
# /v1/completions prompt), half of them with the API key. Prints honest success %, p50/p99, the server's peak RSS during each phase and its RSS 5 s after
# the attack, and how many /health probes (one every 0.5 s, 2 s timeout, from 127.0.0.1) were answered.
# ATTACK=idle,slow,post (the default) picks the parts of the attack. ATTACK_NICE=N runs the attacking process at
# nice N (default 0): on a real server the attackers' own CPU is on other machines, while here it shares the 2
# cores; at 19 what the server spends on them (accepting, reading, refusing) still counts, generating them does not. Loopback only; bounded: every phase stops by itself (about a minute in all with the defaults).
# usage: bench/serve_attack.sh BUILD_DIR [MODEL] [CALLS] [EXTRA SERVE FLAGS...]
#   e.g. bench/serve_attack.sh build ../shared/models/stories260K.gguf 480
set -euo pipefail
build=$1
model=${2:-$(cd "$(dirname "$0")/../.." && pwd)/shared/models/stories260K.gguf}
calls=${3:-480}
shift $(($# < 3 ? $# : 3))
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
key=attack-bench-key
attack_nice=${ATTACK_NICE:-0}

"$build/tokroute" serve -m "$model" --port 0 --ready-file "$tmp/ready" -t 2 -c 512 --quiet --api-key "$key" "$@" \
  2>"$tmp/log" &
pid=$!
for _ in $(seq 300); do [ -s "$tmp/ready" ] && break; sleep 0.1; done
[ -s "$tmp/ready" ] || { cat "$tmp/log"; exit 1; }
url=$(cat "$tmp/ready")
port=${url##*:}

# Samples the server's RSS (KiB) every 50 ms into $1 until $2 exists.
sample_rss() {
  while [ ! -e "$2" ]; do
    awk '/^VmRSS/ {print $2}' /proc/$pid/status >>"$1" 2>/dev/null || true
    sleep 0.05
  done
}
peak() { sort -n "$1" | tail -1 | awk '{printf "%.0f", $1 / 1024}'; }

# One honest run: 8 sessions of CALLS one-token calls; prints "success% p50 p99".
honest() {
  "$build/serve_load" --url "$url" --api-key "$key" --sessions 8 --calls "$calls" --prompt-len 8 --no-rollback \
    --timeout-s 30 --deadline-s 120 --check "$model" >"$tmp/honest.json" 2>"$tmp/honest.err" || true
  python3 - "$tmp/honest.json" "$calls" <<'PY'
import json, sys
try:
    r = json.loads(open(sys.argv[1]).read())
except Exception:
    print("0 nan nan 0"); sys.exit()
ok = r["calls"] - r["errors"]
print(f'{100.0 * ok / (8 * int(sys.argv[2])):.1f} {r["p50_ms"]:.1f} {r["p99_ms"]:.1f} {r["check_mismatches"]}')
PY
}

echo "model: $model, $(nproc) CPUs, server flags: -t 2 -c 512 $*, attackers at nice $attack_nice"
sample_rss "$tmp/rss_base" "$tmp/stop_base" &
sampler=$!
read -r base_ok base_p50 base_p99 base_bad < <(honest)
touch "$tmp/stop_base"
wait $sampler
[ -s "$tmp/honest.err" ] && head -3 "$tmp/honest.err"

# The attackers and the /health prober (asyncio, one process), running until $tmp/stop_attack exists.
nice -n "$attack_nice" python3 - "$port" "$key" "$tmp/stop_attack" "$tmp/attack.json" <<'PY' &
import asyncio, json, os, sys, time
port, key, stop_file, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
stats = {"idle_opened": 0, "idle_refused": 0, "big_posts": 0, "big_status": {}, "slow_opened": 0,
         "health_sent": 0, "health_ok": 0, "idle_held_max": 0}
held = 0
ids = b"1," * 524200 + b"1"
bodies = [(b"/v1/route/next", b'{"session":"attack","pos":0,"tokens":[' + ids + b"]}"),
          (b"/v1/completions", b'{"max_tokens":4,"prompt":[' + ids + b"]}")]

def addr(i):
    return f"127.0.0.{2 + i % 40}"

def stopping():
    return os.path.exists(stop_file)

async def idle(i):
    global held
    while not stopping():
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=(addr(i), 0))
        except OSError:
            stats["idle_refused"] += 1
            await asyncio.sleep(0.5)
            continue
        stats["idle_opened"] += 1
        held += 1
        stats["idle_held_max"] = max(stats["idle_held_max"], held)
        try:
            while not stopping():
                try:
                    data = await asyncio.wait_for(r.read(4096), 1.0)
                    if not data:
                        break
                except asyncio.TimeoutError:
                    pass
        except OSError:
            pass
        held -= 1
        w.close()

async def slowloris(i):
    while not stopping():
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=(addr(i + 7), 0))
        except OSError:
            await asyncio.sleep(0.5)
            continue
        stats["slow_opened"] += 1
        head = b"POST /v1/route/next HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 4000
        try:
            for ch in head:
                if stopping():
                    break
                w.write(bytes([ch]))
                await w.drain()
                await asyncio.sleep(1.0)
                if r.at_eof():
                    break
        except OSError:
            pass
        w.close()

async def big_post(i):
    auth = f"Authorization: Bearer {key}\r\n".encode() if i // 2 % 2 == 0 else b""
    path, body = bodies[i % 2]
    while not stopping():
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=(addr(i + 13), 0))
            w.write(b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + auth +
                    b"Content-Length: %d\r\n\r\n" % len(body))
            w.write(body)
            await w.drain()
            line = await asyncio.wait_for(r.readline(), 10)
            code = line.split(b" ")[1].decode() if len(line.split(b" ")) > 1 else "none"
        except (OSError, asyncio.TimeoutError, IndexError):
            code = "reset"
        stats["big_posts"] += 1
        stats["big_status"][code] = stats["big_status"].get(code, 0) + 1
        try:
            w.close()
        except Exception:
            pass

async def health():
    while not stopping():
        stats["health_sent"] += 1
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
            w.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n"
                    % key.encode())
            line = await asyncio.wait_for(r.readline(), 2)
            if b" 200 " in line:
                stats["health_ok"] += 1
            w.close()
        except (OSError, asyncio.TimeoutError):
            pass
        await asyncio.sleep(0.5)

async def main():
    parts = os.environ.get("ATTACK", "idle,slow,post").split(",")
    tasks = [asyncio.create_task(health())]
    tasks += [asyncio.create_task(idle(i)) for i in range(1100 if "idle" in parts else 0)]
    tasks += [asyncio.create_task(slowloris(i)) for i in range(64 if "slow" in parts else 0)]
    tasks += [asyncio.create_task(big_post(i)) for i in range(32 if "post" in parts else 0)]
    await asyncio.gather(*tasks, return_exceptions=True)

asyncio.run(main())
open(out, "w").write(json.dumps(stats))
PY
attacker=$!
attack_start=$SECONDS
sleep 5 # let the attack build up
sample_rss "$tmp/rss_attack" "$tmp/stop_sample" &
sampler=$!
read -r att_ok att_p50 att_p99 att_bad < <(honest)
while [ $SECONDS -lt $((attack_start + 25)) ]; do sleep 0.5; done # probes and RSS over 25 s at least
touch "$tmp/stop_sample"
touch "$tmp/stop_attack"
wait $attacker || true
wait $sampler
[ -s "$tmp/honest.err" ] && head -3 "$tmp/honest.err"
sleep 5
after=$(awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' /proc/$pid/status)
python3 - "$tmp/attack.json" "$base_ok" "$base_p50" "$base_p99" "$(peak "$tmp/rss_base")" "$att_ok" "$att_p50" \
  "$att_p99" "$(peak "$tmp/rss_attack")" "$after" "$base_bad" "$att_bad" <<'PY'
import json, sys
s = json.loads(open(sys.argv[1]).read())
b_ok, b50, b99, b_rss, a_ok, a50, a99, a_rss, after, b_bad, a_bad = sys.argv[2:13]
print(f'attack: {s["idle_opened"]} idle connections opened (at most {s["idle_held_max"]} held at once, '
      f'{s["idle_refused"]} refused), {s["slow_opened"]} slowloris connections, {s["big_posts"]} 1 MiB posts '
      f'(statuses {s["big_status"]})')
print()
print("| | baseline | under attack |")
print("|---|---|---|")
print(f"| honest requests succeeding | {b_ok}% | {a_ok}% |")
print(f"| honest p50 / p99 | {b50} / {b99} ms | {a50} / {a99} ms |")
print(f"| served tokens differing from the model's | {b_bad} | {a_bad} |")
print(f"| server peak RSS | {b_rss} MiB | {a_rss} MiB ({after} MiB 5 s after the attack) |")
print(f'| `/health` probes answered | - | {s["health_ok"]} of {s["health_sent"]} |')
PY
kill -TERM $pid
wait $pid || true
pid=
