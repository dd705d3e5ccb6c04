"""Routed generation as an iterator of tokens (tr_route_generate, tokroute/route.h "routed generation").

tr_route_generate runs to the end of the generation and reports each token through a callback, so it runs on a
worker thread (ctypes releases the GIL for the call; the callback takes it back only to queue a copy of the token)
and the caller's thread takes tokens off the queue. Stopping early — leaving the loop, close(), an exception, or
Ctrl-C (KeyboardInterrupt, raised in the iterating thread) — sets a flag the library's abort callback polls between
tokens and inside LLM calls; the generation then ends within a token (or an LLM call's poll) and the worker is
joined before the exception goes on, so the context, router and backend are free again (a `tokroute serve`
session ends when its LLM closes). The objects a generation uses belong to it until it ends: one generation at a
time per context, router and backend.
"""
from __future__ import annotations

import ctypes
import math
import queue
import threading
from ctypes import byref, c_int32
from dataclasses import dataclass, fields
from typing import Iterator, Optional, Sequence, Union

from . import _lib
from ._lib import Error, encode, lib
from .llm import LLM
from .model import Context
from .router import Router

MODES = {"joint": 0, "slm": 1, "llm": 2}
ON_LLM_FAILURE = {"fallback": 0, "error": 1}


@dataclass(frozen=True)
class Token:
    """One generated token (tr_route_token): its id and the text it completed (UTF-8 safe; text held back for a
    possible stop string comes with a later token), whether the LLM produced it, the router's score and the τ of
    its decision, the SLM's proposal, and timings."""
    index: int
    id: int
    text: str
    routed: bool          # produced by the LLM
    score: Optional[float]  # router confidence, None when not scored (slm/llm modes)
    tau: float
    slm_id: int           # the SLM's own proposal (-1 in llm mode)
    slm_ms: float
    llm_ms: float         # LLM latency of this token (0 when not routed)
    logprob: float        # NaN when unknown
    llm_unavailable: bool  # routed, but the LLM failed: the SLM's proposal was used
    lookahead_hit: bool
    wait_ms: float


@dataclass(frozen=True)
class Stats:
    """tr_route_stats: the run's counts and timings."""
    n_prompt: int
    n_tokens: int
    n_routed: int
    ttft_ms: float
    mean_tbt_ms: float
    slm_ms: float
    llm_ms: float
    total_ms: float
    router_ms: float
    slm_evaluated: int
    llm_evaluated: int
    stopped_by_eog: bool
    stopped_by_string: bool
    n_fallback: int
    aborted: bool
    llm_calls: int
    llm_blocking: int
    llm_wait_ms: float
    n_lookahead_hits: int
    n_draft_hits: int
    draft_tokens_sent: int
    draft_tokens_verified: int
    n_spec_kept: int
    n_spec_discarded: int
    n_spec_agree: int
    n_spec_disagree: int
    llm_bytes_sent: int
    llm_bytes_received: int
    n_route_decisions: int
    tau_mean: float
    tau_last: float


def _token(t: _lib.RouteToken) -> Token:
    text = ctypes.string_at(t.text, t.text_len).decode("utf-8", "replace") if t.text else ""
    return Token(index=t.index, id=t.id, text=text, routed=t.source == 1, score=t.score if t.score >= 0 else None,
                 tau=t.tau, slm_id=t.slm_id, slm_ms=t.slm_ms, llm_ms=t.llm_ms, logprob=t.logprob,
                 llm_unavailable=t.llm_unavailable, lookahead_hit=t.lookahead_hit, wait_ms=t.wait_ms)


_END = object()


class _Run:
    """The worker's side of a generation: what it reads and what it reports. It holds no reference to the
    Generation, so a Generation dropped mid-run (a loop left with break) is freed at once and its __del__ stops
    the worker."""

    def __init__(self, objects, prompt: list[int], params: _lib.RouteParams, keep: list):
        self.objects, self.prompt, self.params, self.keep = objects, prompt, params, keep
        self.queue: "queue.Queue" = queue.Queue()
        self.abort = threading.Event()
        self.error: Optional[Error] = None
        self.stats: Optional[Stats] = None
        self.tail: list[str] = []

    def on_token(self, _user, token) -> bool:
        self.queue.put(_token(token.contents))
        return not self.abort.is_set()

    def on_text(self, _user, text, length, token) -> bool:
        if not token:  # the held-back tail at the end
            self.tail.append(ctypes.string_at(text, length).decode("utf-8", "replace"))
        return not self.abort.is_set()

    def work(self) -> None:
        ctx, router, llm = self.objects
        p = self.params
        callbacks = (_lib.ROUTE_CALLBACK(self.on_token), _lib.TEXT_CALLBACK(self.on_text),
                     _lib.ABORT_FN(lambda _u: self.abort.is_set()))
        p.on_token, p.on_text, p.abort_fn = callbacks
        prompt = (c_int32 * len(self.prompt))(*self.prompt)
        stats = _lib.RouteStats()
        try:
            st = lib.tr_route_generate(ctx._handle(), router._handle() if router else None,
                                       llm._handle() if llm else None, prompt, len(self.prompt), byref(p), None, 0,
                                       byref(stats))
            if st != 0 and not (stats.aborted and self.abort.is_set()):
                self.error = Error(st, _lib.last_error())  # the message of this (the calling) thread
            self.stats = Stats(**{f.name: getattr(stats, f.name) for f in fields(Stats)})
        except Error as e:
            self.error = e
        finally:
            self.queue.put(_END)


class Generation:
    """Iterate it for Token objects; afterwards .stats holds the run's Stats, .tokens every Token and .text the
    whole text (the tail held back to the end included). stop() (or close(), leaving a with block, or dropping
    the object) ends it early. A new generation on the same context, router or backend, or closing one of them,
    stops a running one first: the library never sees two calls on one of them at once."""

    def __init__(self, context: Context, prompt: list[int], router: Optional[Router], llm: Optional[LLM],
                 params: _lib.RouteParams, keep: list):
        self._run = _Run((context, router, llm), prompt, params, keep)
        self._thread: Optional[threading.Thread] = None
        self._done = False
        self.tokens: list[Token] = []
        for obj in (context, router, llm):
            if obj is not None:
                obj._claim(self)

    def _start(self) -> None:
        ctx, router, llm = self._run.objects
        for obj in (ctx, router, llm):  # the handles must be open now, in the caller's thread
            if obj is not None:
                obj._handle()
        self._thread = threading.Thread(target=self._run.work, name="tokroute-generate", daemon=True)
        self._thread.start()

    def __iter__(self) -> "Generation":
        return self

    def __next__(self) -> Token:
        if self._done:
            raise StopIteration
        if self._thread is None:
            self._start()
        try:
            item = self._run.queue.get()
        except BaseException:  # Ctrl-C (KeyboardInterrupt) while waiting: stop the worker, then let it go on
            self.stop()
            raise
        if item is _END:
            self._done = True
            self._thread.join()
            if self._run.error is not None:
                raise self._run.error
            raise StopIteration
        self.tokens.append(item)
        return item

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Ends the generation (at its next token or LLM poll) and waits for the worker. Idempotent."""
        self._done = True
        self._run.abort.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    close = stop

    def __enter__(self) -> "Generation":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self):
        try:
            self.stop()
        except Exception:
            pass

    def run(self) -> "Generation":
        """Runs to the end (or raises); returns self."""
        for _ in self:
            pass
        return self

    @property
    def stats(self) -> Optional[Stats]:
        """The run's statistics once it has ended (None before)."""
        return self._run.stats if self._done else None

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    @property
    def routed_positions(self) -> list[int]:
        return [t.index for t in self.tokens if t.routed]

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens) + "".join(self._run.tail)


def generate(context: Context, prompt: Union[str, Sequence[int]], *, router: Optional[Router] = None,
             llm: Optional[LLM] = None, mode: Optional[str] = None, tau: Optional[float] = None,
             n_predict: int = 128, temperature: float = 0.0, top_k: Optional[int] = None,
             top_p: Optional[float] = None, seed: Optional[int] = None, stop_at_eog: bool = True,
             stop: Sequence[str] = (), add_bos: bool = True, on_llm_failure: str = "fallback",
             speculate_depth: int = 0, lookahead: int = 0, draft_tokens: int = 0, draft_span: int = 0,
             draft_width: int = 0, draft_fixed: bool = False, target_routed: float = 0.0,
             max_routed: float = 0.0) -> Generation:
    """Generates after prompt (text, tokenized with the SLM's vocabulary as `tokroute generate -p` does, or ids
    used as given) and returns a Generation to iterate.

    mode: "joint" (route tokens whose score < tau to the LLM; the default with an llm), "slm" (the default without
    one) or "llm". tau: the router's default_tau when None (the router file's threshold, 0.5 for policies). A joint
    generation without a router uses the maxprob policy, as the CLI does. Sampling: temperature 0 is greedy.
    on_llm_failure: "fallback" (the SLM's token, marked llm_unavailable) or "error". speculate_depth, lookahead,
    draft_*: hiding the round trip (the same tokens as the synchronous loop); target_routed, max_routed: keeping
    the budget — all as tr_route_params documents them.
    """
    if mode is None:
        mode = "joint" if llm is not None else "slm"
    if mode not in MODES:
        raise Error(1, f"unknown mode '{mode}' (joint, slm or llm)")
    if on_llm_failure not in ON_LLM_FAILURE:
        raise Error(1, f"unknown on_llm_failure '{on_llm_failure}' (fallback or error)")
    if mode != "slm" and llm is None:
        raise Error(1, f"mode {mode} needs an LLM (llm=tokroute.LLM...)")
    keep: list = []
    if mode == "joint" and router is None:
        router = Router.policy("maxprob")
        keep.append(router)
    if isinstance(prompt, str):
        ids = context.model.tokenize(prompt, add_special=True)
        if not add_bos and ids and ids[0] == context.model.vocab.bos:
            ids = ids[1:]
    else:
        ids = [int(i) for i in prompt]
    if not ids:
        raise Error(1, "the prompt is empty")
    p = lib.tr_route_default_params()
    p.mode = MODES[mode]
    p.tau = (router.default_tau if router is not None else 0.5) if tau is None else tau
    p.n_predict = n_predict
    p.sampling.temperature = temperature
    if top_k is not None:
        p.sampling.top_k = top_k
    if top_p is not None:
        p.sampling.top_p = top_p
    if seed is not None:
        p.sampling.seed = seed
    p.stop_at_eog = stop_at_eog
    stops = [encode(s) for s in stop]
    if any(not s for s in stops):
        raise Error(1, "stop strings must not be empty")
    stop_arr = (ctypes.c_char_p * max(len(stops), 1))(*stops)
    keep += [stops, stop_arr]
    p.stop, p.n_stop = (stop_arr if stops else None), len(stops)
    p.on_llm_failure = ON_LLM_FAILURE[on_llm_failure]
    p.speculate_depth, p.lookahead = speculate_depth, lookahead
    p.draft_tokens, p.draft_span, p.draft_width, p.draft_fixed = draft_tokens, draft_span, draft_width, draft_fixed
    p.target_routed, p.max_routed = target_routed, max_routed
    if not math.isfinite(p.tau):
        raise Error(1, "tau must be a finite number")
    return Generation(context, ids, router if mode == "joint" else None, llm if mode != "slm" else None, p, keep)
