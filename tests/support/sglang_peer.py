"""sglang_peer.py — a stand-in for an SGLang server (which needs its Python packages and a GPU) on 127.0.0.1, for the
SGLang backend's tests (tests/transport/test_sglang.c). It answers what the backend uses, shaped as SGLang does:

  POST /generate        GenerateReqInput (python/sglang/srt/managers/io_struct.py): input_ids, sampling_params
                        (max_new_tokens, temperature, top_k, top_p, sampling_seed: srt/sampling/sampling_params.py,
                        validated as SamplingParams.verify does), return_logprob, logprob_start_len (default -1:
                        output tokens only, as if it were n - 1), top_logprobs_num. The reply is {"text",
                        "output_ids", "meta_info"} (srt/managers/tokenizer_manager.py, _handle_batch_output);
                        meta_info has id, finish_reason {"type": "length", "length": m} (or, when the model's
                        end-of-sequence token is drawn, {"type": "stop", "matched": id} with the token kept in
                        output_ids and the logprobs: schedule_batch.py Req.check_finished, FINISH_MATCHED_TOKEN;
                        the id read from MODEL's tokenizer.ggml.eos_token_id by `tokroute inspect`), prompt_tokens,
                        completion_tokens, cached_tokens and, with return_logprob, input_token_logprobs /
                        output_token_logprobs as [logprob, token_id, null] triples (detokenize_logprob_tokens), the
                        input ones starting at logprob_start_len with a null logprob first ("add None at start":
                        srt/managers/scheduler_output_processor_mixin.py, _process_input_token_logprobs), and when
                        top_logprobs_num > 0 input_top_logprobs / output_top_logprobs, one list of triples per
                        position, null where there is none (add_logprob_to_meta_info,
                        detokenize_top_logprobs_tokens). max_new_tokens 0 is a prefill-only request: no output.
                        An invalid request gets 400 {"error": {"message": ...}} as SGLang's ValueErrors do.
  GET /get_model_info   {"model_path", "tokenizer_path", "is_generation", "preferred_sampling_params"}: no
                        vocabulary size, as in SGLang.
  GET /health           200, empty body.

The values are real: each forward pass runs `TOKROUTE_BIN logits -m MODEL --tokens ... --logits OUT.f32` (float32
rows [n_tokens][n_vocab]); log-softmax in float64, top-K by log-probability (lowest id first on ties), greedy =
argmax (lowest id on ties, as torch.argmax and SGLang's top_k 1). With temperature > 0 the peer draws from its own
generator seeded by (sampling_seed, position) — SGLang's seeded draw is a hashed Gumbel-max, not reproduced here;
what the tests need is that a draw depends only on (seed, position). cached_tokens models the radix cache: the
longest prefix shared with an earlier request's tokens, at most n - 1 and at most logprob_start_len (a prefix is
not reused where log-probabilities are asked for: sgl-project/sglang issue #902).

Usage: sglang_peer.py TOKROUTE_BIN MODEL [--log FILE] [--break MODE,MODE,...]
Prints "PORT PID" and serves until killed. --log appends "REQ <method> <path> <body>" per request to FILE. --break
gives the i-th POST /generate the i-th broken reply (later ones are well-formed; "ok" keeps one well-formed); a
request header "X-Peer-Break: MODE" does the same for one request. Modes: not-json, no-id, id-mismatch, id-big
(generated id 100000), abort, short (input_token_logprobs one entry short), misaligned (input ids shifted), null-lp
(a null log-probability at input position 1), top-null (input_top_logprobs[1] null), top-bad-id (a top id -1),
inf (a log-probability 1e999), unordered (top lists reversed), http-400, http-500."""
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BIN, MODEL = sys.argv[1], sys.argv[2]
opts = sys.argv[3:]
LOG = opts[opts.index("--log") + 1] if "--log" in opts else None
BREAKS = opts[opts.index("--break") + 1].split(",") if "--break" in opts else []
EOS = next((int(f[1]) for f in (line.split() for line in subprocess.run(
    [BIN, "inspect", MODEL], check=True, capture_output=True, text=True).stdout.splitlines())
    if len(f) == 2 and f[0] == "tokenizer.ggml.eos_token_id"), None)
lock = threading.Lock()
state = {"posts": 0, "seen": []}  # requests so far; token sequences the "radix cache" holds


class BadRequest(Exception):
    pass


def forward(ids):
    """Log-probability rows (float64 lists) of the model over ids: row i is the distribution of token i + 1."""
    fd, path = tempfile.mkstemp(suffix=".f32")
    os.close(fd)
    try:
        r = subprocess.run([BIN, "logits", "-m", MODEL, "-t", "1", "--tokens", ",".join(map(str, ids)),
                            "--logits", path], capture_output=True, text=True)
        if r.returncode != 0:
            raise BadRequest("the model refused the input: " + r.stderr.strip())
        data = open(path, "rb").read()
    finally:
        os.unlink(path)
    n_vocab = len(data) // 4 // len(ids)
    rows = []
    for i in range(len(ids)):
        row = struct.unpack_from("<%df" % n_vocab, data, i * n_vocab * 4)
        mx = max(row)
        lse = mx + math.log(sum(math.exp(x - mx) for x in row))
        rows.append([x - lse for x in row])
    return rows


def top(row, k):
    return sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]


def triples(row, k):
    return [[row[i], i, None] for i in top(row, k)]


def draw(row, sp, seed, position):
    t = sp.get("temperature", 1.0)
    if t < 1e-6 or sp.get("top_k", -1) == 1:
        return top(row, 1)[0]
    order = top(row, len(row))
    k = sp.get("top_k", -1)
    if k and k > 0:
        order = order[:k]
    w = [math.exp((row[i] - row[order[0]]) / t) for i in order]
    total, kept, acc = sum(w), [], 0.0
    for i, x in zip(order, w):  # top-p: the smallest prefix whose mass reaches top_p
        kept.append((i, x))
        acc += x / total
        if acc >= sp.get("top_p", 1.0):
            break
    rng = random.Random("%s:%d" % (seed, position))
    u = rng.random() * sum(x for _, x in kept)
    for i, x in kept:
        u -= x
        if u <= 0:
            return i
    return kept[-1][0]


def check(req):
    ids = req.get("input_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(x, int) and x >= 0 for x in ids):
        raise BadRequest("Either text, input_ids or input_embeds should be provided.")
    sp = req.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise BadRequest("sampling_params should be an object.")
    m = sp.get("max_new_tokens", 128)
    if not isinstance(m, int) or m < 0:
        raise BadRequest("max_new_tokens must be at least 0, got %r." % (m,))
    t = sp.get("temperature", 1.0)
    if not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise BadRequest("temperature must be a non-negative finite number, got %r." % (t,))
    if not 0.0 < sp.get("top_p", 1.0) <= 1.0:
        raise BadRequest("top_p must be in (0, 1], got %r." % (sp.get("top_p"),))
    k = sp.get("top_k", -1)
    if not isinstance(k, int) or (k < 1 and k != -1):
        raise BadRequest("top_k must be -1 (disable) or at least 1, got %r." % (k,))
    seed = sp.get("sampling_seed")
    if seed is not None and (not isinstance(seed, int) or not -2**31 <= seed < 2**31):
        raise BadRequest("sampling_seed must be an int32, got %r." % (seed,))
    start = req.get("logprob_start_len", -1)
    if not isinstance(start, int) or start >= len(ids):
        raise BadRequest("logprob_start_len (%r) is larger than the number of input tokens (%d)." % (start, len(ids)))
    return ids, sp, m


def generate(req):
    ids, sp, m = check(req)
    n = len(ids)
    want_lp = bool(req.get("return_logprob"))
    start = req.get("logprob_start_len", -1)
    if start < 0:
        start = n - 1
    k = req.get("top_logprobs_num") or 0
    with lock:
        cached = max([0] + [next((i for i, (a, b) in enumerate(zip(s, ids)) if a != b), min(len(s), n))
                            for s in state["seen"]])
    cached = min(cached, n - 1, start if want_lp else n)
    seq, out_ids, out_lp, out_top = list(ids), [], [], []
    rows = forward(seq)
    in_rows = rows
    finish = {"type": "length", "length": m}
    for step in range(m):
        row = rows[-1]
        t = draw(row, sp, sp.get("sampling_seed"), len(seq))
        out_ids.append(t)
        out_lp.append([row[t], t, None])
        out_top.append(triples(row, k))
        seq.append(t)
        if t == EOS:
            finish = {"type": "stop", "matched": t}
            break
        if step + 1 < m:
            rows = forward(seq)
    with lock:
        state["seen"].append(seq)
    meta = {"id": uuid.uuid4().hex, "finish_reason": finish, "prompt_tokens": n,
            "weight_version": "default", "completion_tokens": len(out_ids), "cached_tokens": cached, "e2e_latency": 0.01}
    if want_lp:
        meta["input_token_logprobs"] = [[None, ids[start], None]] + [[in_rows[p - 1][ids[p]], ids[p], None]
                                                                      for p in range(start + 1, n)]
        meta["output_token_logprobs"] = out_lp
        if k > 0:
            meta["input_top_logprobs"] = [None] + [triples(in_rows[p - 1], k) for p in range(start + 1, n)]
            meta["output_top_logprobs"] = out_top
    return {"text": "", "output_ids": out_ids, "meta_info": meta}


def break_reply(mode, r):
    """The reply r (a dict) broken as mode says; returns (status, body bytes)."""
    meta = r["meta_info"]
    if mode == "not-json":
        return 200, b'{"text": "", "output_ids": ['
    if mode == "http-400":
        return 400, b'{"error": {"message": "logprob_start_len (7) is larger than the number of input tokens."}}'
    if mode == "http-500":
        return 500, b'{"error": {"message": "scheduler crashed"}}'
    if mode == "no-id":
        del r["output_ids"]
        meta.pop("output_token_logprobs", None)
    elif mode == "id-mismatch":
        meta["output_token_logprobs"][0][1] = r["output_ids"][0] + 1
    elif mode == "id-big":
        r["output_ids"][0] = 100000
        meta.get("output_token_logprobs", [[0, 0]])[0][1] = 100000
    elif mode == "abort":
        r["output_ids"] = []
        meta["output_token_logprobs"] = []
        meta["finish_reason"] = {"type": "abort", "message": "The server is overloaded."}
    elif mode == "short":
        meta["input_token_logprobs"].pop()
    elif mode == "misaligned":
        meta["input_token_logprobs"] = meta["input_token_logprobs"][1:] + [meta["input_token_logprobs"][0]]
    elif mode == "null-lp":
        meta["input_token_logprobs"][1][0] = None
    elif mode == "top-null":
        meta["input_top_logprobs"][1] = None
    elif mode == "top-bad-id":
        meta["input_top_logprobs"][1][0][1] = -1
    elif mode == "inf":
        meta["input_token_logprobs"][1][0] = "INF"
    elif mode == "unordered":
        meta["input_top_logprobs"] = [t[::-1] if t else t for t in meta["input_top_logprobs"]]
    body = json.dumps(r).encode()
    return 200, body.replace(b'"INF"', b"1e999")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log(self, body):
        if LOG:
            with lock, open(LOG, "a") as f:
                f.write("REQ %s %s %s\n" % (self.command, self.path, body.replace("\n", " ")))

    def do_GET(self):
        self.log("")
        if self.path == "/health":
            self.send(200, b"", "text/plain")
        elif self.path == "/get_model_info":
            self.send(200, json.dumps({"model_path": MODEL, "tokenizer_path": MODEL, "is_generation": True,
                                       "preferred_sampling_params": None}).encode())
        else:
            self.send(404, b'{"detail": "Not Found"}')

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        self.log(body)
        if self.path != "/generate":
            return self.send(404, b'{"detail": "Not Found"}')
        with lock:
            i = state["posts"]
            state["posts"] += 1
        mode = self.headers.get("X-Peer-Break") or (BREAKS[i] if i < len(BREAKS) else "ok")
        try:
            r = generate(json.loads(body))
        except (BadRequest, ValueError) as e:
            return self.send(400, json.dumps({"error": {"message": str(e)}}).encode())
        if mode == "ok":
            return self.send(200, json.dumps(r).encode())
        self.send(*break_reply(mode, r))


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(srv.server_address[1], os.getpid(), flush=True)
srv.serve_forever()
