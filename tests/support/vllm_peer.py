"""vllm_peer.py — a protocol peer answering POST /v1/completions as vLLM's OpenAI-compatible server does, for the
fields the --openai backend uses, with real numbers: each request's token-id prompt is run through
`TOKROUTE_BIN logits` (all rows' logits of MODEL), and log-softmax, top-K and ranks are taken here.

What it follows (vllm-project/vllm, read 2025-26):
  - vllm/entrypoints/openai/completion/protocol.py: CompletionRequest (prompt as token ids, max_tokens default 16,
    echo, logprobs, prompt_logprobs, temperature, top_k, top_p, seed, stream, return_token_ids,
    return_tokens_as_token_ids) and its check_logprobs validator ("`prompt_logprobs` are not available when
    `stream=True`.", "must be a positive value or -1."); to_sampling_params: max_tokens 0 is accepted only with echo
    (it becomes 1 inside), prompt_logprobs defaults to logprobs under echo; CompletionResponseChoice fields
    (text, logprobs, finish_reason, stop_reason, token_ids, prompt_logprobs, prompt_token_ids).
  - vllm/sampling_params.py: "max_tokens must be at least 1, got N."
  - vllm/v1/engine/input_processor.py (processor.py before): _validate_logprobs, the --max-logprobs limit (default
    20; -1 = the vocabulary size): "Requested sample logprobs of N, which is greater than max allowed: M" and
    "Requested prompt logprobs of N, ...".
  - vllm/logprobs.py: create_prompt_logprobs (None first), append_logprobs_for_next_position (the actual token first
    with its own rank, then the top K with ranks 1..K; a duplicate key keeps its first place).
  - vllm/v1/sample/ops/logprobs.py: rank = how many ids have a log-probability >= the token's.
  - vllm/entrypoints/generate/base/serving.py: clamp_prompt_logprobs (-inf -> -9999.0).
  - vllm/entrypoints/openai/completion/serving.py: request_output_to_completion_response and
    _create_completion_logprobs (tokens "token_id:N" under return_tokens_as_token_ids; top_logprobs the sampled token
    plus the top K, values max(logprob, -9999.0)); without a tokenizer (this peer has none, like
    skip_tokenizer_init) text tokens are refused: "Unable to get tokenizer because `skip_tokenizer_init=True`".
  - vllm/v1/core/sched/utils.py check_stop: the model's end-of-sequence token ends a request with
    finish_reason "stop" (stop_reason None) even at max_tokens; the token stays in token_ids and the logprobs (only
    the text leaves it out). The peer reads the id from MODEL's tokenizer.ggml.eos_token_id (`tokroute inspect`).
  - errors: HTTP 400 {"error": {"message", "type": "BadRequestError", "param", "code": 400}}.
  - GET /health answers 200 with an empty body; GET /v1/models lists the model (no vocabulary size).

usage: vllm_peer.py TOKROUTE_BIN MODEL [--max-logprobs N] [--broken KIND,KIND,...]
Prints "PORT PID", then "REQ <body>" for every POST. With --broken, the i-th POST /v1/completions gets a good reply
broken in the i-th way (then good replies): missing-position, null-position, bad-key, negative-key, id-out-of-range,
nan, neg-infinity, huge, string-logprob, too-many-keys, dup-key, missing-actual, no-prompt-logprobs,
wrong-prompt-ids, no-next, text-keys, positive, not-json, choices-empty."""
import http.server
import json
import math
import os
import random
import socketserver
import struct
import subprocess
import sys
import tempfile
import time


def bad_request(message, param=None):
    return 400, {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}


def eos_id(binary, model):
    """The model's end-of-sequence id (tokenizer.ggml.eos_token_id), or None."""
    out = subprocess.run([binary, "inspect", model], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == "tokenizer.ggml.eos_token_id":
            return int(f[1])
    return None


class Peer:
    def __init__(self, binary, model, max_logprobs, broken):
        self.binary, self.model, self.max_logprobs, self.broken = binary, model, max_logprobs, broken
        self.n_completions = 0
        self.n_vocab = None
        self.eos = eos_id(binary, model)

    def log_softmax_rows(self, ids):
        """[len(ids)][n_vocab] log-probabilities: row i is the distribution of the token after ids[0..i]."""
        with tempfile.NamedTemporaryFile(suffix=".f32") as out:
            subprocess.run([self.binary, "logits", "-m", self.model, "--tokens", ",".join(map(str, ids)),
                            "--logits", out.name, "-t", "1"], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            data = open(out.name, "rb").read()
        n_vocab = len(data) // 4 // len(ids)
        self.n_vocab = n_vocab
        flat = struct.unpack("<%df" % (len(data) // 4), data)
        rows = []
        for i in range(len(ids)):
            row = flat[i * n_vocab:(i + 1) * n_vocab]
            mx = max(row)
            lse = mx + math.log(sum(math.exp(x - mx) for x in row))
            rows.append([x - lse for x in row])
        return rows

    @staticmethod
    def top(row, k):
        return sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]

    @staticmethod
    def rank(row, token):
        return sum(1 for x in row if x >= row[token])

    def position_dict(self, row, actual, k):
        """One prompt position as vLLM's dict[int, Logprob]: the actual token first, then the top k."""
        d = {actual: {"logprob": max(row[actual], -9999.0), "rank": self.rank(row, actual), "decoded_token": None}}
        for r, t in enumerate(self.top(row, k)):
            if t not in d:
                d[t] = {"logprob": max(row[t], -9999.0), "rank": r + 1, "decoded_token": None}
            else:
                d[t]["rank"] = r + 1
        return d

    def completions(self, req):
        prompt = req.get("prompt")
        if not isinstance(prompt, list) or not prompt or not all(isinstance(x, int) and x >= 0 for x in prompt):
            return bad_request("this peer takes a prompt of token ids only", "prompt")
        echo = bool(req.get("echo"))
        max_tokens = req.get("max_tokens", 16)
        if max_tokens is None:
            max_tokens = 16
        logprobs, prompt_logprobs = req.get("logprobs"), req.get("prompt_logprobs")
        for name, v in (("prompt_logprobs", prompt_logprobs), ("logprobs", logprobs)):
            if v is not None and not isinstance(v, (int, float)):
                return bad_request("`%s` must be an integer." % name, name)
            if v is not None and v < 0 and v != -1:
                return bad_request("`%s` must be a positive value or -1." % name, name)
        if prompt_logprobs is not None and req.get("stream") and (prompt_logprobs > 0 or prompt_logprobs == -1):
            return bad_request("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
        if req.get("stream"):
            return bad_request("this peer does not stream", "stream")
        if prompt_logprobs is None and echo:
            prompt_logprobs = logprobs
        if not (echo and max_tokens == 0) and max_tokens < 1:
            return bad_request("max_tokens must be at least 1, got %d." % max_tokens, "max_tokens")
        rows = self.log_softmax_rows(prompt)
        n_vocab = len(rows[0])
        if any(x >= n_vocab for x in prompt):
            return bad_request("Token id %d is out of vocabulary" % max(prompt), "prompt")
        limit = n_vocab if self.max_logprobs == -1 else self.max_logprobs
        for name, v, what in (("logprobs", logprobs, "sample"), ("prompt_logprobs", prompt_logprobs, "prompt")):
            n = n_vocab if v == -1 else v
            if n and n > limit:
                return bad_request("Requested %s logprobs of %d, which is greater than max allowed: %d" %
                                   (what, n, limit), name)
        k_prompt = n_vocab if prompt_logprobs == -1 else prompt_logprobs
        k_sample = n_vocab if logprobs == -1 else logprobs
        as_ids = bool(req.get("return_tokens_as_token_ids"))
        if logprobs is not None and not as_ids:
            return bad_request("Unable to get tokenizer because `skip_tokenizer_init=True`", "skip_tokenizer_init")

        # The generated token: greedy at temperature 0 (vLLM's default temperature is 1.0), else drawn with the
        # request's seed from top-k/top-p of the last row.
        last = rows[-1]
        temperature = req.get("temperature")
        temperature = 1.0 if temperature is None else temperature
        if temperature <= 0:
            sampled = self.top(last, 1)[0]
        else:
            k = req.get("top_k")
            cand = self.top(last, k if k and k > 0 else len(last))
            w = [math.exp((last[t] - last[cand[0]]) / temperature) for t in cand]
            top_p, acc, keep = req.get("top_p") or 1.0, 0.0, []
            for t, x in zip(cand, w):
                keep.append((t, x))
                acc += x
                if acc >= top_p * sum(w):
                    break
            rng = random.Random(req.get("seed"))
            sampled = rng.choices([t for t, _ in keep], weights=[x for _, x in keep])[0]
        generated = [] if echo and max_tokens == 0 else [sampled]

        plp = None
        if k_prompt:
            plp = [None] + [self.position_dict(rows[p - 1], prompt[p], k_prompt) for p in range(1, len(prompt))]
        sample_lp = [self.position_dict(last, sampled, k_sample)] if k_sample and generated else []
        lp_obj = None
        if logprobs is not None:
            token_ids = (prompt + generated) if echo else generated
            steps = ((plp or [None] * len(prompt)) + sample_lp) if echo else sample_lp
            lp_obj = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
            for t, step in zip(token_ids, steps):
                lp_obj["text_offset"].append(0)
                lp_obj["tokens"].append("token_id:%d" % t)
                if step is None:
                    lp_obj["token_logprobs"].append(None)
                    lp_obj["top_logprobs"].append(None)
                    continue
                lp_obj["token_logprobs"].append(max(step[t]["logprob"], -9999.0))
                items = list(step.items())
                lp_obj["top_logprobs"].append({"token_id:%d" % tid: max(v["logprob"], -9999.0)
                                               for i, (tid, v) in enumerate(items) if k_sample >= i})
        finish = "stop" if generated and generated[-1] == self.eos else "length"
        choice = {"index": 0, "text": "", "logprobs": lp_obj, "finish_reason": finish, "stop_reason": None,
                  "token_ids": generated if req.get("return_token_ids") else None,
                  "prompt_logprobs": plp,
                  "prompt_token_ids": prompt if req.get("return_token_ids") else None}
        reply = {"id": "cmpl-peer-%d" % self.n_completions, "object": "text_completion", "created": int(time.time()),
                 "model": req.get("model") or "peer", "choices": [choice],
                 "usage": {"prompt_tokens": len(prompt), "total_tokens": len(prompt) + len(generated),
                           "completion_tokens": len(generated), "prompt_tokens_details": None}}
        return 200, reply

    def breaking(self, kind, status, reply, req):
        """The good reply broken in one way; returns the body text."""
        if status != 200:
            return json.dumps(reply)
        choice = reply["choices"][0]
        plp = choice["prompt_logprobs"] or []
        mid = len(plp) // 2
        pos = plp[mid] if 0 < mid < len(plp) else None
        actual = req["prompt"][mid] if pos is not None else None
        others = [t for t in (pos or {}) if t != actual]
        if kind == "missing-position":
            del plp[-1]
        elif kind == "null-position":
            plp[mid] = None
        elif kind == "bad-key":
            pos["abc"] = pos.pop(others[0])
        elif kind == "negative-key":
            pos[-5] = pos.pop(others[0])
        elif kind == "id-out-of-range":
            pos[99999] = pos.pop(others[0])
        elif kind == "string-logprob":
            pos[others[0]]["logprob"] = str(pos[others[0]]["logprob"])
        elif kind == "too-many-keys":
            for t in range(self.n_vocab or 512):
                pos.setdefault(t, {"logprob": -50.0, "rank": 1000, "decoded_token": None})
        elif kind == "missing-actual":
            del pos[actual]
        elif kind == "no-prompt-logprobs":
            del choice["prompt_logprobs"]
        elif kind == "wrong-prompt-ids":
            choice["prompt_token_ids"] = [choice["prompt_token_ids"][0] + 1] + choice["prompt_token_ids"][1:]
        elif kind == "no-next":
            choice["logprobs"] = None
        elif kind == "text-keys":
            top0 = choice["logprobs"]["top_logprobs"][0]
            choice["logprobs"]["top_logprobs"][0] = {" tok%s" % k: v for k, v in top0.items()}
        elif kind == "positive":
            pos[others[0]]["logprob"] = 0.5
        elif kind == "choices-empty":
            reply["choices"] = []
        elif kind == "not-json":
            return "<html>502 bad gateway</html>"
        elif kind in ("nan", "neg-infinity", "huge", "dup-key"):
            marker = -12345.678
            pos[others[0]]["logprob"] = marker
            text = json.dumps(reply)
            lit = {"nan": "NaN", "neg-infinity": "-Infinity", "huge": "-1e999"}.get(kind)
            if lit:
                return text.replace(repr(marker), lit, 1)
            # dup-key: the actual token listed a second time, as a JSON object may (a dict cannot).
            entry = '"%d": {"logprob": -0.25, "rank": 1, "decoded_token": null}, ' % actual
            at = text.index('"%d": {"logprob": %r' % (others[0], marker))
            return text[:at] + entry + text[at:]
        else:
            raise ValueError("unknown --broken kind " + kind)
        return json.dumps(reply)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, body):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        peer = self.server.peer
        if self.path == "/health":
            self.send_json(200, "")
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "peer", "object": "model", "owned_by": "vllm",
                                                             "max_model_len": 1024}]})
        else:
            self.send_json(404, {"error": {"message": "Not Found", "type": "NotFoundError", "code": 404}})

    def do_POST(self):
        peer = self.server.peer
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        print("REQ", body, flush=True)
        if self.path != "/v1/completions":
            return self.send_json(404, {"error": {"message": "Not Found", "type": "NotFoundError", "code": 404}})
        try:
            req = json.loads(body)
        except ValueError:
            return self.send_json(*bad_request("the body is not JSON"))
        status, reply = peer.completions(req)
        i = peer.n_completions
        peer.n_completions += 1
        if i < len(peer.broken):
            return self.send_json(status, peer.breaking(peer.broken[i], status, reply, req))
        self.send_json(status, reply)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    max_logprobs, broken = 20, []
    rest = args[2:]
    while rest:
        flag = rest.pop(0)
        if flag == "--max-logprobs":
            max_logprobs = int(rest.pop(0))
        elif flag == "--broken":
            broken = rest.pop(0).split(",")
        else:
            sys.exit("unknown flag " + flag)
    srv = Server(("127.0.0.1", 0), Handler)
    srv.peer = Peer(args[0], args[1], max_logprobs, broken)
    print(srv.server_address[1], os.getpid(), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
