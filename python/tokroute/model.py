"""Models, their vocabularies and contexts: loading a GGUF, tokenizing and detokenizing, chat templates, and the
SLM context that routed generation runs in (tokroute.h: "models and contexts", "vocabularies", "chat templates").

Threads (as the header says): a Model and its Vocab are read-only once loaded and may be shared by any number of
threads; a Context is used by one thread at a time (different contexts over the same model may run in parallel).
"""
from __future__ import annotations

import ctypes
import os
from ctypes import byref, c_int, c_int32, c_void_p
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence, Union

from . import _lib
from ._handle import Handle
from ._lib import Error, check, encode, lib

KV_TYPES = {"default": 0, "f16": 1, "f32": 2, "q8_0": 3}
PathLike = Union[str, "os.PathLike[str]"]


def _kv_type(name: str | None) -> int:
    if name is None:
        return 0
    if name not in KV_TYPES:
        raise Error(1, f"unknown KV cache type '{name}' (known: {', '.join(KV_TYPES)})")
    return KV_TYPES[name]


@dataclass(frozen=True)
class ModelInfo:
    """tr_model_info: the model's architecture and sizes."""
    arch: str
    name: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_ctx_train: int
    rope_theta: float
    norm_eps: float
    tied_output: bool
    n_params: int
    weight_bytes: int
    token_read_bytes: int  # weight bytes one decoded token reads (lookup tables: one row)


class Vocab:
    """The tokenizer a model loaded (borrowed from its Model: valid while the model is open). Read-only: may be
    shared between threads."""

    def __init__(self, model: "Model"):
        self._model = model

    def _v(self):
        v = lib.tr_model_vocab(self._model._handle())
        if not v:
            raise Error(4, f"the model {self._model.path} has no vocabulary")
        return v

    @property
    def n_tokens(self) -> int:
        return lib.tr_vocab_n_tokens(self._v())

    @property
    def bos(self) -> int:
        """The BOS id, -1 when none."""
        return lib.tr_vocab_bos(self._v())

    @property
    def eos(self) -> int:
        return lib.tr_vocab_eos(self._v())

    @property
    def eot(self) -> int:
        return lib.tr_vocab_eot(self._v())

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT and the vocabulary's other end markers)."""
        return bool(lib.tr_vocab_is_eog(self._v(), token))

    def token_text(self, token: int) -> str | None:
        """The token's stored text (SentencePiece "▁" as in the file), None for a bad id."""
        t = lib.tr_vocab_token_text(self._v(), token)
        return t.decode("utf-8", "replace") if t is not None else None

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of text; BOS/EOS added as the vocabulary asks when add_special."""
        data = text.encode("utf-8")
        params = lib.tr_tokenize_default_params()
        params.add_special, params.parse_special = add_special, parse_special
        cap = len(data) + 8
        while True:
            buf = (c_int32 * cap)()
            n = c_int32()
            st = lib.tr_tokenize(self._v(), data, len(data), byref(params), buf, cap, byref(n))
            if st == 6 and n.value > cap:  # TR_ERR_RANGE: retry with the exact count
                cap = n.value
                continue
            check(st)
            return list(buf[: n.value])

    def token_to_piece(self, token: int, render_special: bool = False) -> bytes:
        """The bytes one token stands for (a piece may be part of a UTF-8 character)."""
        cap = 64
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = lib.tr_token_to_piece(self._v(), token, render_special, buf, cap)
            if n < 0:
                raise Error(6, f"token id {token} is negative")
            if n <= cap:
                return buf.raw[:n]
            cap = n

    def detokenize(self, tokens: Sequence[int], remove_leading_space: bool = True,
                   render_special: bool = False) -> str:
        """The text of a whole sequence (SentencePiece's dummy-prefix space removed when remove_leading_space)."""
        ids = (c_int32 * len(tokens))(*tokens)
        out = c_void_p()
        check(lib.tr_detokenize(self._v(), ids, len(tokens), remove_leading_space, render_special, byref(out)))
        return _lib.take_string(out)

    def chat_tokenize(self, messages: Iterable[Mapping[str, str]], template: str | None = None,
                      add_assistant: bool = True, add_special: bool = True) -> list[int]:
        """Renders messages ({"role", "content"}) with the chat template (the model's own when None) and tokenizes
        them so that control tokens come only from the template (safe for untrusted text)."""
        t = self._model._template(template)
        msgs, _keep = _messages(messages)
        n = c_int32()
        st = lib.tr_chat_tokenize(self._v(), t, msgs, len(msgs), add_assistant, add_special, None, 0, byref(n))
        if st not in (0, 6):
            check(st)
        buf = (c_int32 * max(n.value, 1))()
        check(lib.tr_chat_tokenize(self._v(), t, msgs, len(msgs), add_assistant, add_special, buf, n.value, byref(n)))
        return list(buf[: n.value])


def _messages(messages):
    items = list(messages)
    keep = [(encode(m["role"]), encode(m["content"])) for m in items]
    arr = (_lib.ChatMessage * len(keep))(*[_lib.ChatMessage(r, c) for r, c in keep])
    return arr, keep


def chat_template_name(template: int) -> str:
    return lib.tr_chat_template_name(template).decode()


def apply_chat_template(template: str, messages: Iterable[Mapping[str, str]], add_assistant: bool = True) -> str:
    """Renders messages as a prompt string with a named template ("chatml", "llama2", "llama3", "gemma")."""
    t = _lib.enum_from_name(lib.tr_chat_template_from_name, template, "chat template")
    msgs, _keep = _messages(messages)
    out = c_void_p()
    check(lib.tr_chat_apply(t, msgs, len(msgs), add_assistant, byref(out)))
    return _lib.take_string(out)


class Model(Handle):
    """A GGUF model (tr_model_load). Read-only once loaded: share it between threads freely.

    >>> with tokroute.Model("stories-student.gguf") as slm:
    ...     ids = slm.tokenize("Once upon a time")
    """
    _free = lib.tr_model_free

    def __init__(self, path: PathLike, use_mmap: bool = True, load_vocab: bool = True,
                 kv_type: str | None = None):
        super().__init__()
        self.path = os.fspath(path)
        params = lib.tr_model_default_params()
        params.use_mmap, params.load_vocab, params.kv_type = use_mmap, load_vocab, _kv_type(kv_type)
        ptr = c_void_p()
        check(lib.tr_model_load(encode(self.path), byref(params), byref(ptr)))
        self._ptr = ptr.value
        self.vocab = Vocab(self)

    def _info_c(self):
        return lib.tr_model_get_info(self._handle())

    @property
    def info(self) -> ModelInfo:
        i = self._info_c().contents
        return ModelInfo(arch=i.arch_name.decode(), name=(i.name or b"").decode("utf-8", "replace"),
                         n_vocab=i.n_vocab, n_embd=i.n_embd, n_layer=i.n_layer, n_head=i.n_head,
                         n_head_kv=i.n_head_kv, head_dim=i.head_dim, n_ff=i.n_ff, n_ctx_train=i.n_ctx_train,
                         rope_theta=i.rope_theta, norm_eps=i.norm_eps, tied_output=i.tied_output,
                         n_params=i.n_params, weight_bytes=i.weight_bytes,
                         token_read_bytes=i.token_read_bytes)

    @property
    def chat_template(self) -> str | None:
        """The chat template the file's tokenizer.chat_template matches ("chatml", ...), None when none is known."""
        t = self._detect_template()
        return chat_template_name(t) if t else None

    def _detect_template(self) -> int:
        g = c_void_p()
        check(lib.tr_gguf_open(encode(self.path), byref(g)))
        try:
            return lib.tr_chat_template_detect(g)
        finally:
            lib.tr_gguf_close(g)

    def _template(self, name: str | None) -> int:
        if name is not None:
            return _lib.enum_from_name(lib.tr_chat_template_from_name, name, "chat template")
        t = self._detect_template()
        if not t:
            raise Error(1, f"the model {self.path} has no known chat template; name one (template=...)")
        return t

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Same as model.vocab.tokenize."""
        return self.vocab.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: Sequence[int], remove_leading_space: bool = True,
                   render_special: bool = False) -> str:
        """Same as model.vocab.detokenize."""
        return self.vocab.detokenize(tokens, remove_leading_space, render_special)

    def context(self, n_ctx: int = 0, n_threads: int = 0, n_batch: int = 0, kv_type: str | None = None) -> "Context":
        """A new context over this model (see Context)."""
        return Context(self, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch, kv_type=kv_type)


def context_params(n_ctx: int = 0, n_threads: int = 0, n_batch: int = 0, kv_type: str | None = None):
    p = lib.tr_context_default_params()
    p.n_ctx, p.n_threads = n_ctx, n_threads
    if n_batch:
        p.n_batch = n_batch
    p.kv_type = _kv_type(kv_type)
    return p


class Context(Handle):
    """A KV cache and activations over a model (tr_context_create): the SLM side of routed generation. Used by one
    thread at a time. n_ctx 0 = min(training context, 4096); n_threads 0 = physical cores."""
    _free = lib.tr_context_free

    def __init__(self, model: Model, n_ctx: int = 0, n_threads: int = 0, n_batch: int = 0,
                 kv_type: str | None = None):
        super().__init__()
        params = context_params(n_ctx, n_threads, n_batch, kv_type)
        ptr = c_void_p()
        check(lib.tr_context_create(model._handle(), byref(params), byref(ptr)))
        self._ptr = ptr.value
        self.model = model
        self._depend_on(model)

    @property
    def n_ctx(self) -> int:
        return lib.tr_context_n_ctx(self._handle())

    @property
    def n_past(self) -> int:
        return lib.tr_context_n_past(self._handle())

    @property
    def n_threads(self) -> int:
        return lib.tr_context_n_threads(self._handle())

    def clear(self) -> None:
        lib.tr_context_clear(self._handle())

    def generate(self, prompt, **kwargs):
        """Routed (or single-model) generation from this context: see tokroute.generate."""
        from .generate import generate
        return generate(self, prompt, **kwargs)
