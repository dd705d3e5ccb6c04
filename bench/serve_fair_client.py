#!/usr/bin/env python3
"""serve_fair_client.py — the load of bench/serve_fair.sh: N threads, one session each on its own keep-alive
connection, each call appending APPEND random token ids to its sequence and asking for one token, for DURATION
seconds. Speaks either tokroute's session protocol (POST /v1/route/next with only the new tokens) or llama.cpp's
llama-server (POST /completion with the whole growing id prompt, cache_prompt, n_predict 1). A sequence that
reaches --max-len starts over as a new session. Prints one JSON line: calls, errors, calls_per_s, p50_ms, p99_ms
(and for tokroute the server-reported queue_ms percentiles).

--burst PROMPT: bursts instead of a steady load. All N sessions start together (a barrier), each with a PROMPT-token
first call, then --calls calls of APPEND tokens, each asking for one token; --bursts such rounds one after the other
(new sessions each time). p50/p99 are over every call, prompts included; prompt_p50/p99 over the first calls only
and call_p50/p99 over the others; calls_per_s counts all calls over the bursts' time.

usage: serve_fair_client.py --kind tokroute|llama --host H --port P --sessions N [--duration S] [--append 8]
                            [--max-len 512] [--vocab 151936] [--tag T] [--burst PROMPT [--calls 16] [--bursts 3]]
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


def one_call(a, conn, session, seq, new):
    """One call of a burst; (ok, new conn, what went wrong). seq: the tokens the server already holds."""
    if a.kind == "tokroute":
        body, path = {"session": session, "pos": len(seq), "tokens": new}, "/v1/route/next"
    else:
        body, path = {"prompt": seq + new, "n_predict": 1, "cache_prompt": True, "temperature": 0}, "/completion"
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        return r.status == 200, conn, b"" if r.status == 200 else b"%d " % r.status + data[:200]
    except (OSError, http.client.HTTPException) as e:
        conn.close()
        return False, http.client.HTTPConnection(a.host, a.port, timeout=600), repr(e).encode()[:200]


def burst_worker(a, index, barrier, prompt_lat, call_lat, errors, lock):
    rng = random.Random(index * 7919 + 3)
    conn = http.client.HTTPConnection(a.host, a.port, timeout=600)
    conn.connect()
    for b in range(a.bursts):
        seq, session = [], f"{a.tag}-b{b}-{index}"
        barrier.wait()
        for c in range(a.calls + 1):
            new = [rng.randrange(100, a.vocab) for _ in range(a.burst if c == 0 else a.append)]
            t0 = time.monotonic()
            ok, conn, err = one_call(a, conn, session, seq, new)
            ms = (time.monotonic() - t0) * 1e3
            with lock:
                if ok:
                    (prompt_lat if c == 0 else call_lat).append(ms)
                else:
                    errors.append(err)
            if not ok:
                break
            seq += new
    conn.close()


def burst(a):
    prompt_lat, call_lat, errors, lock = [], [], [], threading.Lock()
    barrier = threading.Barrier(a.sessions)
    threads = [threading.Thread(target=burst_worker, args=(a, i, barrier, prompt_lat, call_lat, errors, lock))
               for i in range(a.sessions)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    ms, prompt_lat, call_lat = sorted(prompt_lat + call_lat), sorted(prompt_lat), sorted(call_lat)

    def pct(q, v):
        return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")

    print(json.dumps({"kind": a.kind, "sessions": a.sessions, "burst": a.burst, "calls": len(ms),
                      "errors": len(errors), "first_error": errors[0].decode(errors="replace") if errors else "",
                      "calls_per_s": len(ms) / elapsed, "p50_ms": pct(0.50, ms),
                      "p99_ms": pct(0.99, ms), "prompt_p50_ms": pct(0.50, prompt_lat),
                      "prompt_p99_ms": pct(0.99, prompt_lat), "call_p50_ms": pct(0.50, call_lat),
                      "call_p99_ms": pct(0.99, call_lat)}))


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
    p.add_argument("--burst", type=int, default=0, help="prompt tokens: burst mode (see the docstring)")
    p.add_argument("--calls", type=int, default=16)
    p.add_argument("--bursts", type=int, default=3)
    a = p.parse_args()
    if a.burst:
        burst(a)
        return
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
