#!/usr/bin/env python3
"""serve_fair_client.py — the load of bench/serve_fair.sh: N threads, one session each on its own keep-alive
connection, each call appending APPEND random token ids to its sequence and asking for one token, for DURATION
seconds. Speaks either tokroute's session protocol (POST /v1/route/next with only the new tokens) or llama.cpp's
llama-server (POST /completion with the whole growing id prompt, cache_prompt, n_predict 1). A sequence that
reaches --max-len starts over as a new session. Prints one JSON line: calls, errors, calls_per_s, p50_ms, p99_ms
(and for tokroute the server-reported queue_ms percentiles).

usage: serve_fair_client.py --kind tokroute|llama --host H --port P --sessions N [--duration S] [--append 8]
                            [--max-len 512] [--vocab 151936] [--tag T]
"""
import argparse
import http.client
import json
import random
import threading
import time


def worker(a, index, deadline, lat, queue, errors, lock):
    rng = random.Random(index * 7919 + 1)
    conn = http.client.HTTPConnection(a.host, a.port, timeout=120)
    seq, gen = [], 0
    headers = {"Content-Type": "application/json"}
    while time.monotonic() < deadline:
        if len(seq) + a.append >= a.max_len:  # llama-server needs room for the token it generates
            seq, gen = [], gen + 1
        new = [rng.randrange(100, a.vocab) for _ in range(a.append)]
        if a.kind == "tokroute":
            body = {"session": f"{a.tag}-{index}-{gen}", "pos": len(seq), "tokens": new}
            path = "/v1/route/next"
        else:
            body = {"prompt": seq + new, "n_predict": 1, "cache_prompt": True, "temperature": 0}
            path = "/completion"
        t0 = time.monotonic()
        try:
            conn.request("POST", path, json.dumps(body), headers)
            r = conn.getresponse()
            data = r.read()
            ok = r.status == 200
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection(a.host, a.port, timeout=120)
            ok, data = False, b""
        t1 = time.monotonic()
        with lock:
            if ok:
                lat.append((t1, (t1 - t0) * 1e3))
                if a.kind == "tokroute":  # where the time went, by the server's own account
                    t = json.loads(data).get("timings", {})
                    queue.append(t.get("queue_ms", 0))
            else:
                errors.append(data[:200])
        if ok:
            seq += new
        else:  # start over: the server may have dropped the session
            seq, gen = [], gen + 1
    conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=["tokroute", "llama"], required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sessions", type=int, required=True)
    p.add_argument("--duration", type=float, default=20)
    p.add_argument("--append", type=int, default=8)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--tag", default="fair")
    a = p.parse_args()
    lat, queue, errors, lock = [], [], [], threading.Lock()
    start = time.monotonic()
    deadline = start + a.duration
    threads = [threading.Thread(target=worker, args=(a, i, deadline, lat, queue, errors, lock)) for i in range(a.sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = max((t for t, _ in lat), default=time.monotonic())
    ms = sorted(x for _, x in lat)

    queue.sort()

    def pct(q, v=ms):
        return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")

    print(json.dumps({"kind": a.kind, "sessions": a.sessions, "calls": len(ms), "errors": len(errors),
                      "first_error": errors[0].decode(errors="replace") if errors else "",
                      "calls_per_s": len(ms) / (end - start), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
                      "queue_p50_ms": pct(0.50, queue), "queue_p99_ms": pct(0.99, queue)}))


if __name__ == "__main__":
    main()
