"""Routers: the training-free policies (maxprob, margin, entropy) and trained router files (an MLP over the SLM's
hidden state and logit features), as tokroute.h's "routers" section. A router holds scratch buffers: one thread at
a time."""
from __future__ import annotations

import ctypes
from ctypes import byref, c_float, c_uint, c_void_p
from typing import Optional, Sequence

import numpy as np

from . import _lib
from ._handle import Handle
from ._lib import Error, check, encode, lib
from .model import Model

FEATURES = {"maxprob": 1, "entropy": 2, "margin": 4, "topk_logprobs": 8, "token_embedding": 16, "induction": 32,
            "ngram": 64}


def parse_features(features) -> int:
    """Feature bits from a list of names, a comma-separated string ("maxprob,entropy,topk") or an int."""
    if isinstance(features, int):
        return features
    text = features if isinstance(features, str) else ",".join(features) if features else "none"
    out = c_uint()
    check(lib.tr_router_features_parse(encode(text), byref(out)))
    return out.value


def feature_names(bits: int) -> list[str]:
    return [lib.tr_router_feature_name(b).decode() for b in FEATURES.values() if bits & b]


def feature_width(features, topk: int, n_embd: int) -> int:
    """Inputs the features add after the hidden state."""
    return lib.tr_router_feature_width(parse_features(features), topk, n_embd)


class Router(Handle):
    """A policy (Router.policy("maxprob")) or a trained router file (Router.load(path, slm=model))."""
    _free = lib.tr_router_free

    def __init__(self, ptr, slm: Optional[Model] = None):
        super().__init__()
        self._ptr = ptr
        self.slm = slm
        self._depend_on(slm)

    @classmethod
    def policy(cls, name: str = "maxprob") -> "Router":
        """A training-free policy: "maxprob", "margin" or "entropy"."""
        p = _lib.enum_from_name(lib.tr_policy_from_name, name, "policy")
        if p == 0:
            raise Error(1, "the mlp policy is a router file: use Router.load(path)")
        ptr = c_void_p()
        check(lib.tr_router_create(p, byref(ptr)))
        return cls(ptr.value)

    @classmethod
    def load(cls, path, slm: Optional[Model] = None, n_threads: int = 1) -> "Router":
        """Loads a router file (GGUF). With slm its sizes are checked against the model and the token_embedding
        feature can read the model's embeddings (as `tokroute generate --router` does)."""
        ptr = c_void_p()
        info = slm._info_c() if slm is not None else None
        check(lib.tr_router_load(encode(path), info, byref(ptr)))
        router = cls(ptr.value, slm)
        if slm is not None:
            check(lib.tr_router_set_slm(router._ptr, slm._handle()))
        if n_threads != 1:
            check(lib.tr_router_set_threads(router._ptr, n_threads))
        return router

    @property
    def policy_name(self) -> str:
        return lib.tr_policy_name(lib.tr_router_policy(self._handle())).decode()

    @property
    def default_tau(self) -> float:
        """The threshold stored in a router file (policies: 0.5)."""
        return float(lib.tr_router_default_tau(self._handle()))

    @property
    def features(self) -> list[str]:
        return feature_names(lib.tr_router_features(self._handle()))

    @property
    def topk(self) -> int:
        return lib.tr_router_topk(self._handle())

    @property
    def context(self) -> int:
        """Previous positions the router reads besides the one it scores (0: that position only)."""
        return lib.tr_router_context(self._handle())

    def score(self, hidden: Sequence[float], logits: Sequence[float], position: Optional[int] = None) -> float:
        """Confidence in [0, 1] of one position from the SLM's final hidden state and logits (route when < tau).
        A router with context also reads the positions before it that it scored or observed since reset(), and
        keeps this one's inputs: position (1 = a sequence's first predicted token, as collect numbers them) says
        where it is; None means the position after the latest one scored or observed."""
        h, lg = self._rows(hidden, logits)
        out = c_float()
        if position is None:
            check(lib.tr_router_score(self._handle(), h.ctypes.data_as(_lib.F32P), h.size,
                                      lg.ctypes.data_as(_lib.F32P), lg.size, byref(out)))
        else:
            check(lib.tr_router_score_at(self._handle(), int(position), h.ctypes.data_as(_lib.F32P), h.size,
                                         lg.ctypes.data_as(_lib.F32P), lg.size, byref(out)))
        return out.value

    def observe(self, position: int, hidden: Sequence[float], logits: Sequence[float]) -> None:
        """Keeps a position's inputs without scoring it (a prompt's last positions, for a router with context)."""
        h, lg = self._rows(hidden, logits)
        check(lib.tr_router_observe(self._handle(), int(position), h.ctypes.data_as(_lib.F32P), h.size,
                                    lg.ctypes.data_as(_lib.F32P), lg.size))

    def reset(self) -> None:
        """Forgets every position kept: call at each new sequence (a no-op for routers without context)."""
        lib.tr_router_reset(self._handle())

    def tokens(self, ids: Sequence[int]) -> None:
        """The sequence's tokens (ids[q] at position q: BOS, prompt, generated), which a router with the induction
        or ngram feature reads before each score (scoring position p needs ids[0..p)); others ignore them."""
        a = np.ascontiguousarray(ids, dtype=np.int32)
        check(lib.tr_router_tokens(self._handle(), a.ctypes.data_as(_lib.I32P), a.size))

    @staticmethod
    def _rows(hidden, logits):
        return np.ascontiguousarray(hidden, dtype=np.float32), np.ascontiguousarray(logits, dtype=np.float32)


def write_mlp_router(path, weights: Sequence[np.ndarray], biases: Sequence[np.ndarray], *, features, topk: int,
                     tau: float, slm_name: str, slm_n_embd: int, slm_n_vocab: int, context: int = 0) -> None:
    """Writes a router file (tr_router_write_mlp): layer i has weights [out][in] row-major and biases [out]; ReLU
    between layers, sigmoid at the end (the last layer has one output). The input is the hidden state followed by
    the features, then context previous positions' hidden states and logit features (nearest first), so weights[0]
    has slm_n_embd + feature_width(...) + context * (slm_n_embd + the logit features' width) columns."""
    ws = [np.ascontiguousarray(w, dtype=np.float32) for w in weights]
    bs = [np.ascontiguousarray(b, dtype=np.float32).reshape(-1) for b in biases]
    if not ws or len(ws) != len(bs):
        raise Error(1, "write_mlp_router: give one weight matrix and one bias vector per layer")
    sizes = [ws[0].shape[1]] + [w.shape[0] for w in ws]
    for i, (w, b) in enumerate(zip(ws, bs)):
        if w.ndim != 2 or w.shape[1] != sizes[i] or b.shape[0] != w.shape[0]:
            raise Error(1, f"write_mlp_router: layer {i} has weights {w.shape} and biases {b.shape}, "
                           f"which do not chain from {sizes[i]} inputs")
    n = len(ws)
    c_sizes = (ctypes.c_int32 * (n + 1))(*sizes)
    c_w = (_lib.F32P * n)(*[w.ctypes.data_as(_lib.F32P) for w in ws])
    c_b = (_lib.F32P * n)(*[b.ctypes.data_as(_lib.F32P) for b in bs])
    desc = _lib.MlpRouterDesc(n_layers=n, sizes=c_sizes, weights=c_w, biases=c_b, features=parse_features(features),
                              tau=tau, slm_name=encode(slm_name), slm_n_embd=slm_n_embd, slm_n_vocab=slm_n_vocab,
                              topk=topk, context=context)
    check(lib.tr_router_write_mlp(byref(desc), encode(path)))
