"""broken_stream_server.py — a real HTTP/1.1 peer on 127.0.0.1 for the client's streamed /v1/route/next: it answers
with a valid answer line and then breaks the stream in the ways a network or a failing server can, so the client's
handling of what follows an answer can be tested. Prints its port and pid, then one line per request it gets:
"REQ <method> <path> <body>". Replies by the order of the POSTs it gets:

  0: answer (token 7) + {"lookahead": 9}, then the connection drops mid-stream (no end of the chunked body)
  1: plain JSON reply (token 8)
  2: answer (token 7) + {"lookahead": 9} + {"error": ...} as the last line, a well-formed end
  3: plain JSON reply (token 8)
  4: answer (token 7) + {"lookahead": 9} + {"lookahead": "x"} (malformed) + done
  5 and later: plain JSON reply (token 8)

DELETE gets 204. Every reply's "pos" is the request's pos + len(tokens), as the protocol says.

With --slow it is a slow but well-behaved streamer instead, serving each connection on its own thread: the first
POST gets its answer (token 7) at once and then one {"lookahead": 9} line every second, 8 in all, then done (a
client that left the stream is expected to send its next request on another connection meanwhile); every other
POST gets a plain reply (token 8). Its request lines then read "REQ <connection> <method> <path> <body>".

With --sse it plays llama.cpp's POST /completion instead (events "data: {...}" with one token and its 1-based
"tokens_predicted" each, a final event with "stop": true), by the order of the POSTs:

  0: a stream whose first token event is position 2 (llama.cpp held the answer back: it ends inside a UTF-8
     character), then the final event
  1: plain JSON reply (tokens [8])
  2: answer 7 (position 1), lookahead 9 (position 2), then token 10 at position 4 (a held-back token), final event
  3: answer 7, then an "error: ..." line
  4 and later: plain JSON reply (tokens [8])"""
import json
import os
import socket
import sys
import threading
import time


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def line(obj):
    return chunk(json.dumps(obj).encode() + b"\n")


def read_request(f):
    head = f.readline()
    if not head:
        return None
    method, path, _ = head.decode().split(" ", 2)
    length = 0
    while True:
        h = f.readline().decode()
        if h in ("\r\n", "\n", ""):
            break
        k, v = h.split(":", 1)
        if k.strip().lower() == "content-length":
            length = int(v)
    body = f.read(length).decode() if length else ""
    return method, path, body


def answer_line(r, held, token):
    return {"session": r["session"], "token": token, "logprob": -0.5, "top_logprobs": [], "pos": held,
            "lookahead": [], "n_evaluated": len(r["tokens"]), "timings": {}}


def plain_reply(r, held):
    reply = json.dumps(answer_line(r, held, 8)).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(reply), reply))


def serve_slowly(conn, number, posts, lock):
    f = conn.makefile("rb")
    try:
        while True:
            req = read_request(f)
            if req is None:
                break
            method, path, body = req
            print("REQ", number, method, path, body.replace("\n", " "), flush=True)
            if method == "DELETE":
                conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
                continue
            r = json.loads(body)
            held = r["pos"] + len(r["tokens"])
            with lock:
                n = posts[0]
                posts[0] += 1
            if n > 0:
                conn.sendall(plain_reply(r, held))
                continue
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + line(answer_line(r, held, 7)))
            for _ in range(8):
                time.sleep(1.0)
                conn.sendall(line({"lookahead": 9}))
            conn.sendall(line({"done": True, "n_evaluated": len(r["tokens"]) + 8, "timings": {}}) + b"0\r\n\r\n")
    except OSError:
        pass  # the client closed a stream it had left
    finally:
        f.close()
        conn.close()


def sse(obj):
    return chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


def llama_event(token, position):
    return sse({"content": "x", "tokens": [token], "stop": False, "tokens_predicted": position,
                "tokens_evaluated": 3, "completion_probabilities": [{"id": token, "logprob": -0.25}],
                "timings": {"prompt_n": 3, "predicted_n": position}})


def serve_serially(srv, answer):
    """Serves one connection at a time, logging each request; DELETE gets 204, and answer(conn, body, n) replies to
    the n-th POST, returning False to drop the connection."""
    posts = 0
    while True:
        conn, _ = srv.accept()
        f = conn.makefile("rb")
        while True:
            req = read_request(f)
            if req is None:
                break
            method, path, body = req
            print("REQ", method, path, body.replace("\n", " "), flush=True)
            if method == "DELETE":
                conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
                continue
            posts += 1
            if not answer(conn, body, posts - 1):
                break
        f.close()
        conn.close()


def answer_broken(conn, body, n):
    r = json.loads(body)
    held = r["pos"] + len(r["tokens"])
    if n not in (0, 2, 4):
        conn.sendall(plain_reply(r, held))
        return True
    out = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    out += line(answer_line(r, held, 7)) + line({"lookahead": 9})
    if n == 0:
        conn.sendall(out)
        return False  # drop the connection mid-stream
    if n == 2:
        out += line({"error": {"code": "internal", "message": "pass failed"}})
    else:
        out += line({"lookahead": "x"}) + line({"done": True, "n_evaluated": len(r["tokens"]) + 2, "timings": {}})
    conn.sendall(out + b"0\r\n\r\n")
    return True


def answer_sse(conn, body, n):
    final = sse({"content": "", "tokens": [], "stop": True, "timings": {"prompt_n": 3, "predicted_n": 3}})
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    if n == 0:
        conn.sendall(head + llama_event(9, 2) + final + b"0\r\n\r\n")
    elif n == 2:
        conn.sendall(head + llama_event(7, 1) + llama_event(9, 2) + llama_event(10, 4) + final + b"0\r\n\r\n")
    elif n == 3:
        conn.sendall(head + llama_event(7, 1) + chunk(b"error: {\"message\": \"slot failed\"}\n\n") + b"0\r\n\r\n")
    else:
        reply = json.dumps({"content": "x", "tokens": [8], "stop": True,
                            "completion_probabilities": [{"id": 8, "logprob": -0.5}],
                            "timings": {"prompt_n": 3}}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(reply), reply))
    return True


def main_slow(srv):
    posts, lock, number = [0], threading.Lock(), 0
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve_slowly, args=(conn, number, posts, lock), daemon=True).start()
        number += 1


def main():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    print(srv.getsockname()[1], os.getpid(), flush=True)
    if "--slow" in sys.argv[1:]:
        return main_slow(srv)
    return serve_serially(srv, answer_sse if "--sse" in sys.argv[1:] else answer_broken)


if __name__ == "__main__":
    sys.exit(main())
