#!/usr/bin/env bash
# burst.sh — fairness across keys over HTTP (issue 34): while one key's session prefills a 480-token prompt at one row
# a pass (--batch-tokens 1), another key's session makes 2-token calls; /metrics' tokroute_queue_wait_passes then
# shows that no route request waited for more than the pass in flight (le="1" holds them all), and at least one
# call ended before the prompt did; each reply's timings.queue_passes says the same of that request (an integer,
# at most 1 for a call; the replies' sum is the histogram's sum). Counted in passes, not timed; every wait is bounded.
set -euo pipefail
cli=$1
shared=$2
llm=$shared/models/stories260K.gguf
source "$(dirname "$0")/../support/e2e.sh" # tmp, pids, fail, start_serve

start_serve 0 --api-key ka --api-key kb --batch-tokens 1 -c 512 --quiet
python3 - "$url" >"$tmp/result.txt" 2>&1 <<'EOF' || fail "$(tail -3 "$tmp/result.txt")"
import json, sys, threading, time, urllib.request

url = sys.argv[1]

def post(key, body):
    req = urllib.request.Request(url + "/v1/route/next", json.dumps(body).encode(),
                                 {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        reply = json.loads(r.read())
    waits.append(reply["timings"]["queue_passes"])  # KeyError: a reply without it
    return reply

def metric(name):
    req = urllib.request.Request(url + "/metrics", headers={"Authorization": "Bearer kb"})
    with urllib.request.urlopen(req, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
    raise SystemExit(f"no {name} in /metrics")

waits = []  # every reply's timings.queue_passes
proved = 0
for attempt in range(5):  # a loaded machine may run the whole prompt before the first call comes: try again
    done = threading.Event()
    prompt = [1 + (i * 37 + attempt) % 511 for i in range(480)]
    p0 = metric("tokroute_forward_passes_total")
    t = threading.Thread(target=lambda: (post("ka", {"session": f"long{attempt}", "pos": 0, "tokens": prompt}),
                                         done.set()))
    t.start()
    for _ in range(10000):
        if metric("tokroute_forward_passes_total") > p0 or done.is_set():
            break
        time.sleep(0.001)
    pos = 0
    while not done.is_set() and pos + 2 <= 256:
        post("kb", {"session": f"short{attempt}", "pos": pos, "tokens": [5 + pos, 9 + pos]})
        if not isinstance(waits[-1], int) or not 0 <= waits[-1] <= 1:
            raise SystemExit(f"a call's reply says it waited {waits[-1]!r} passes")
        pos += 2
        proved += not done.is_set()
    t.join()
    if proved:
        break
within = metric('tokroute_queue_wait_passes_bucket{le="1"}')
count = metric("tokroute_queue_wait_passes_count")
total = metric("tokroute_queue_wait_passes_sum")
print(f"calls during the prompt: {proved}; waits within one pass: {within:.0f} of {count:.0f}")
if not proved:
    raise SystemExit("no call ended before the prompt did")
if len(waits) != count or sum(waits) != total:
    raise SystemExit(f"replies: {len(waits)} waiting {sum(waits)} passes in all; /metrics: {count:.0f}, {total:.0f}")
if within != count:
    raise SystemExit(f"{count - within:.0f} route requests waited more than one pass")
EOF
cat "$tmp/result.txt"
echo "burst ok"
