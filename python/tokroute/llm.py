"""LLM backends: where routed tokens come from (tokroute/route.h, "LLM backends"). LLM.embedded(model) runs the
LLM in this process; LLM.server(url) talks to `tokroute serve` (its session is deleted when the backend closes);
LLM.openai, LLM.llamacpp and LLM.sglang reach other engines. The same choices as the CLI's --llm, --server,
--openai, --llamacpp and --sglang. A backend is used by one thread at a time (one per conversation)."""
from __future__ import annotations

from ctypes import byref, c_float, c_int32, c_void_p
from dataclasses import dataclass
from typing import Optional, Sequence

from . import _lib
from ._handle import Handle
from ._lib import check, encode, lib
from .model import Model, context_params


@dataclass(frozen=True)
class LLMStats:
    """tr_llm_stats: what the backend has done since it was opened."""
    calls: int
    tokens_evaluated: int
    time_ms: float
    failures: int
    short_circuited: int
    lookahead_tokens: int
    draft_tokens_sent: int
    draft_tokens_verified: int
    bytes_sent: int
    bytes_received: int


def _sampling(temperature: float = 0.0, top_k: Optional[int] = None, top_p: Optional[float] = None,
              seed: Optional[int] = None):
    s = lib.tr_sampler_default_params()
    s.temperature = temperature
    if top_k is not None:
        s.top_k = top_k
    if top_p is not None:
        s.top_p = top_p
    if seed is not None:
        s.seed = seed
    return s


class LLM(Handle):
    """An LLM backend. Build one with a class method; close() (or a with block) frees it."""
    _free = lib.tr_llm_backend_free

    def __init__(self, ptr, model: Optional[Model] = None):
        super().__init__()
        self._ptr = ptr
        self.model = model
        self._depend_on(model)

    @classmethod
    def embedded(cls, model: Model, n_ctx: int = 0, n_threads: int = 0, kv_type: Optional[str] = None,
                 temperature: float = 0.0, seed: Optional[int] = None) -> "LLM":
        """The LLM loaded in this process (--llm FILE). Greedy unless temperature > 0."""
        cp = context_params(n_ctx, n_threads, 0, kv_type)
        sp = _sampling(temperature, seed=seed)
        ptr = c_void_p()
        check(lib.tr_llm_backend_embedded(model._handle(), byref(cp), byref(sp), byref(ptr)))
        return cls(ptr.value, model)

    @classmethod
    def _remote(cls, kind: str, url: str, api_key: Optional[str], cacert: Optional[str], model: Optional[str],
                timeout_ms: Optional[int], connect_timeout_ms: Optional[int], retries: Optional[int],
                top_logprobs: int = 0, temperature: float = 0.0, seed: Optional[int] = None) -> "LLM":
        p = lib.tr_remote_default_params()
        keep = [encode(url), encode(api_key), encode(cacert), encode(model)]
        p.url, p.api_key, p.cacert, p.model = keep
        if timeout_ms is not None:
            p.timeout_ms = timeout_ms
        if connect_timeout_ms is not None:
            p.connect_timeout_ms = connect_timeout_ms
        if retries is not None:
            p.retries = retries
        p.top_logprobs = top_logprobs
        p.sampling = _sampling(temperature, seed=seed)
        ptr = c_void_p()
        check(getattr(lib, "tr_llm_backend_" + kind)(byref(p), byref(ptr)))
        return cls(ptr.value)

    @classmethod
    def server(cls, url: str, api_key: Optional[str] = None, cacert: Optional[str] = None,
               timeout_ms: Optional[int] = None, connect_timeout_ms: Optional[int] = None,
               retries: Optional[int] = None, temperature: float = 0.0, seed: Optional[int] = None) -> "LLM":
        """`tokroute serve` (--server URL): the session protocol; the session is deleted on close()."""
        return cls._remote("server", url, api_key, cacert, None, timeout_ms, connect_timeout_ms, retries,
                           temperature=temperature, seed=seed)

    @classmethod
    def openai(cls, url: str, model: Optional[str] = None, api_key: Optional[str] = None,
               cacert: Optional[str] = None, timeout_ms: Optional[int] = None,
               connect_timeout_ms: Optional[int] = None, retries: Optional[int] = None,
               top_logprobs: int = 0) -> "LLM":
        """Any OpenAI-compatible /v1/completions (--openai URL --openai-model NAME): vLLM, SGLang, tokroute serve."""
        return cls._remote("openai", url, api_key, cacert, model, timeout_ms, connect_timeout_ms, retries,
                           top_logprobs)

    @classmethod
    def llamacpp(cls, url: str, api_key: Optional[str] = None, cacert: Optional[str] = None,
                 timeout_ms: Optional[int] = None, connect_timeout_ms: Optional[int] = None,
                 retries: Optional[int] = None, top_logprobs: int = 0) -> "LLM":
        """llama.cpp's server (--llamacpp URL)."""
        return cls._remote("llamacpp", url, api_key, cacert, None, timeout_ms, connect_timeout_ms, retries,
                           top_logprobs)

    @classmethod
    def sglang(cls, url: str, api_key: Optional[str] = None, cacert: Optional[str] = None,
               timeout_ms: Optional[int] = None, connect_timeout_ms: Optional[int] = None,
               retries: Optional[int] = None, top_logprobs: int = 0) -> "LLM":
        """SGLang's native API (--sglang URL)."""
        return cls._remote("sglang", url, api_key, cacert, None, timeout_ms, connect_timeout_ms, retries,
                           top_logprobs)

    @property
    def name(self) -> str:
        return lib.tr_llm_backend_name(self._handle()).decode()

    @property
    def n_vocab(self) -> int:
        """Vocabulary size the LLM reports (0 when unknown). May contact the server."""
        return lib.tr_llm_backend_n_vocab(self._handle())

    @property
    def n_ctx(self) -> int:
        """Longest sequence the LLM takes (0 when unknown). May contact the server."""
        return lib.tr_llm_backend_n_ctx(self._handle())

    @property
    def stats(self) -> LLMStats:
        s = lib.tr_llm_backend_stats(self._handle())
        return LLMStats(**{f: getattr(s, f) for f, _ in _lib.LlmStats._fields_})

    def set_rtt(self, rtt_ms: float) -> None:
        """Simulates a network round trip on every call (--simulate-rtt)."""
        lib.tr_llm_backend_set_rtt(self._handle(), rtt_ms)

    def set_allowed(self, n_allowed: int) -> None:
        """Restricts the LLM's choices to ids < n_allowed (0: no restriction)."""
        lib.tr_llm_backend_set_allowed(self._handle(), n_allowed)

    def set_breaker(self, cooldown_ms: int, max_cooldown_ms: int) -> None:
        """Circuit breaker after network failures (cooldown_ms 0 turns it off)."""
        lib.tr_llm_backend_set_breaker(self._handle(), cooldown_ms, max_cooldown_ms)

    def next_token(self, tokens: Sequence[int]) -> tuple[int, float]:
        """The LLM's next token after the sequence and its log-probability (NaN when not reported)."""
        ids = (c_int32 * len(tokens))(*tokens)
        out, lp = c_int32(), c_float()
        check(lib.tr_llm_next_token_ex(self._handle(), ids, len(tokens), byref(out), byref(lp)))
        return out.value, lp.value
