"""The ctypes layer: finds libtokroute.so, mirrors the C structs of include/tokroute.h (and tokroute/*.h) field by
field, declares every function's signature, and turns a failing tr_status into tokroute.Error.

Struct layouts are checked against the C compiler's (tests/python/test_layout.py compares sizeof and offsetof of
every struct mirrored here with what tests/python/layout.c prints). ctypes' CDLL releases the GIL around every
foreign call, so C work runs while other Python threads do theirs.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char_p, c_double, c_float, c_int, c_int32, c_int64,
                    c_size_t, c_uint, c_uint64, c_void_p)
from pathlib import Path

STATUS_NAMES = ["ok", "arg", "io", "format", "unsupported", "nomem", "range", "network", "timeout", "state"]


class Error(Exception):
    """A tokroute call failed. ``status`` is the library's short status name ("io", "format", "network", ...),
    ``code`` its number (tr_status) and ``message`` the library's own message (tr_last_error)."""

    def __init__(self, code: int, message: str):
        self.code = int(code)
        self.status = STATUS_NAMES[self.code] if 0 <= self.code < len(STATUS_NAMES) else str(code)
        self.message = message
        super().__init__(message if message else self.status)


def _candidates():
    env = os.environ.get("TOKROUTE_LIBRARY")
    if env:
        yield env
        return
    here = Path(__file__).resolve().parent
    for build in ("build", "build-python"):  # a checkout: python/tokroute/ → ../../build/
        yield str(here.parent.parent / build / "libtokroute.so")
    found = ctypes.util.find_library("tokroute")
    if found:
        yield found


def _load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: not found")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("tokroute: cannot load libtokroute.so (build it: cmake --build build --target tokroute_shared, "
                      "or set TOKROUTE_LIBRARY): " + "; ".join(errors))


lib, library_path = _load()

# ---------------------------------------------------------------- structs (same order and types as the header)

class ModelParams(Structure):
    _fields_ = [("use_mmap", c_bool), ("load_vocab", c_bool), ("kv_type", c_int)]


class ModelInfoC(Structure):
    _fields_ = [("arch", c_int), ("arch_name", c_char_p), ("name", c_char_p),
                ("n_vocab", c_int32), ("n_embd", c_int32), ("n_layer", c_int32), ("n_head", c_int32),
                ("n_head_kv", c_int32), ("head_dim", c_int32), ("n_ff", c_int32), ("n_ctx_train", c_int32),
                ("rope_theta", c_float), ("norm_eps", c_float), ("tied_output", c_bool),
                ("n_params", c_uint64), ("weight_bytes", c_uint64), ("main_type", c_int),
                ("token_read_bytes", c_uint64)]


class ContextParams(Structure):
    _fields_ = [("n_ctx", c_int32), ("n_threads", c_int32), ("n_batch", c_int32), ("kv_type", c_int)]


class SamplerParams(Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int32), ("top_p", c_float), ("seed", c_uint64)]


class TokenizeParams(Structure):
    _fields_ = [("add_special", c_bool), ("parse_special", c_bool)]


class ChatMessage(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class MlpRouterDesc(Structure):
    _fields_ = [("n_layers", c_int32), ("sizes", POINTER(c_int32)), ("weights", POINTER(POINTER(c_float))),
                ("biases", POINTER(POINTER(c_float))), ("features", c_uint), ("tau", c_float),
                ("slm_name", c_char_p), ("slm_n_embd", c_int32), ("slm_n_vocab", c_int32), ("topk", c_int32),
                ("context", c_int32), ("ngram", c_void_p)]


class LlmStats(Structure):
    _fields_ = [("calls", c_int64), ("tokens_evaluated", c_int64), ("time_ms", c_double), ("failures", c_int64),
                ("short_circuited", c_int64), ("lookahead_tokens", c_int64), ("draft_tokens_sent", c_int64),
                ("draft_tokens_verified", c_int64), ("bytes_sent", c_int64), ("bytes_received", c_int64)]


class RemoteParams(Structure):
    _fields_ = [("url", c_char_p), ("api_key", c_char_p), ("cacert", c_char_p), ("model", c_char_p),
                ("timeout_ms", c_int32), ("connect_timeout_ms", c_int32), ("retries", c_int32),
                ("top_logprobs", c_int32), ("sampling", SamplerParams)]


class RouteToken(Structure):
    _fields_ = [("index", c_int32), ("id", c_int32), ("source", c_int), ("slm_id", c_int32), ("score", c_float),
                ("tau", c_float), ("slm_ms", c_double), ("llm_ms", c_double), ("text", c_void_p),
                ("text_len", c_size_t), ("logprob", c_float), ("llm_unavailable", c_bool),
                ("lookahead_hit", c_bool), ("wait_ms", c_double)]


ROUTE_CALLBACK = CFUNCTYPE(c_bool, c_void_p, POINTER(RouteToken))
TEXT_CALLBACK = CFUNCTYPE(c_bool, c_void_p, c_void_p, c_size_t, POINTER(RouteToken))
ABORT_FN = CFUNCTYPE(c_bool, c_void_p)


class RouteParams(Structure):
    _fields_ = [("mode", c_int), ("tau", c_float), ("n_predict", c_int32), ("sampling", SamplerParams),
                ("stop_at_eog", c_bool), ("stop", POINTER(c_char_p)), ("n_stop", c_int32),
                ("on_token", ROUTE_CALLBACK), ("user", c_void_p), ("on_text", TEXT_CALLBACK),
                ("on_llm_failure", c_int), ("abort_fn", ABORT_FN), ("abort_user", c_void_p),
                ("speculate_depth", c_int32), ("lookahead", c_int32), ("draft_tokens", c_int32),
                ("draft_span", c_int32), ("draft_width", c_int32), ("draft_fixed", c_bool),
                ("target_routed", c_double), ("max_routed", c_double)]


class RouteStats(Structure):
    _fields_ = [("n_prompt", c_int32), ("n_tokens", c_int32), ("n_routed", c_int32), ("ttft_ms", c_double),
                ("mean_tbt_ms", c_double), ("slm_ms", c_double), ("llm_ms", c_double), ("total_ms", c_double),
                ("router_ms", c_double), ("slm_evaluated", c_int64), ("llm_evaluated", c_int64),
                ("stopped_by_eog", c_bool), ("stopped_by_string", c_bool), ("n_fallback", c_int32),
                ("aborted", c_bool), ("llm_calls", c_int64), ("llm_blocking", c_int64), ("llm_wait_ms", c_double),
                ("n_lookahead_hits", c_int32), ("n_draft_hits", c_int32), ("draft_tokens_sent", c_int64),
                ("draft_tokens_verified", c_int64), ("n_spec_kept", c_int32), ("n_spec_discarded", c_int32),
                ("n_spec_agree", c_int32), ("n_spec_disagree", c_int32), ("llm_bytes_sent", c_int64),
                ("llm_bytes_received", c_int64), ("n_route_decisions", c_int32), ("tau_mean", c_float),
                ("tau_last", c_float)]


class TrainDataInfo(Structure):
    _fields_ = [("n_embd", c_int32), ("n_vocab", c_int32), ("topk", c_int32), ("rollouts", c_int32),
                ("n_examples", c_int32), ("n_positions", c_int64), ("slm_correct", c_int64),
                ("llm_correct", c_int64), ("both_wrong", c_int64), ("slm_name", c_char_p), ("slm_path", c_char_p)]


class TrainPosition(Structure):
    _fields_ = [("example", c_int32), ("position", c_int32), ("group", c_int32), ("truth", c_int32),
                ("slm_top1", c_int32), ("llm_top1", c_int32), ("slm_p_top1", c_float), ("llm_p_top1", c_float),
                ("slm_p_truth", c_float), ("llm_p_truth", c_float), ("llm_p_slm_top1", c_float),
                ("slm_p_llm_top1", c_float), ("maxprob", c_float), ("entropy", c_float), ("margin", c_float),
                ("rollout_slm", c_int32), ("rollout_llm", c_int32)]


class GapPoint(Structure):
    _fields_ = [("target_routed", c_double), ("routed", c_double), ("tau", c_float), ("accuracy", c_double),
                ("gap_closed", c_double)]


class GapReport(Structure):
    _fields_ = [("slm_accuracy", c_double), ("llm_accuracy", c_double), ("oracle_accuracy", c_double)]


# Every struct mirrored here, by its C name (the layout test walks this table).
STRUCTS = {
    "tr_model_params": ModelParams, "tr_model_info": ModelInfoC, "tr_context_params": ContextParams,
    "tr_sampler_params": SamplerParams, "tr_tokenize_params": TokenizeParams, "tr_chat_message": ChatMessage,
    "tr_mlp_router_desc": MlpRouterDesc, "tr_llm_stats": LlmStats, "tr_remote_params": RemoteParams,
    "tr_route_token": RouteToken, "tr_route_params": RouteParams, "tr_route_stats": RouteStats,
    "tr_train_data_info": TrainDataInfo, "tr_train_position": TrainPosition, "tr_gap_point": GapPoint,
    "tr_gap_report": GapReport,
}

# ---------------------------------------------------------------- functions

P = c_void_p  # opaque handles
I32P = POINTER(c_int32)
F32P = POINTER(c_float)


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


S = c_int  # tr_status
_fn("tr_status_name", c_char_p, c_int)
_fn("tr_last_error", c_char_p)
_fn("tr_version", c_char_p)
_fn("tr_physical_cores", c_int)
_fn("tr_kv_type_name", c_char_p, c_int)
# GGUF (for chat-template detection)
_fn("tr_gguf_open", S, c_char_p, POINTER(P))
_fn("tr_gguf_close", None, P)
# models and contexts
_fn("tr_model_default_params", ModelParams)
_fn("tr_model_load", S, c_char_p, POINTER(ModelParams), POINTER(P))
_fn("tr_model_free", None, P)
_fn("tr_model_get_info", POINTER(ModelInfoC), P)
_fn("tr_model_vocab", P, P)
_fn("tr_context_default_params", ContextParams)
_fn("tr_context_create", S, P, POINTER(ContextParams), POINTER(P))
_fn("tr_context_free", None, P)
_fn("tr_context_n_ctx", c_int32, P)
_fn("tr_context_n_past", c_int32, P)
_fn("tr_context_n_threads", c_int32, P)
_fn("tr_context_clear", None, P)
# sampling
_fn("tr_sampler_default_params", SamplerParams)
# vocabularies
_fn("tr_vocab_n_tokens", c_int32, P)
_fn("tr_vocab_bos", c_int32, P)
_fn("tr_vocab_eos", c_int32, P)
_fn("tr_vocab_eot", c_int32, P)
_fn("tr_vocab_is_eog", c_bool, P, c_int32)
_fn("tr_vocab_token_text", c_char_p, P, c_int32)
_fn("tr_tokenize_default_params", TokenizeParams)
_fn("tr_tokenize", S, P, c_char_p, c_size_t, POINTER(TokenizeParams), I32P, c_int32, I32P)
_fn("tr_token_to_piece", c_int32, P, c_int32, c_bool, c_char_p, c_int32)
_fn("tr_detokenize", S, P, I32P, c_int32, c_bool, c_bool, POINTER(c_void_p))
# chat templates
_fn("tr_chat_template_detect", c_int, P)
_fn("tr_chat_template_from_name", S, c_char_p, POINTER(c_int))
_fn("tr_chat_template_name", c_char_p, c_int)
_fn("tr_chat_apply", S, c_int, POINTER(ChatMessage), c_size_t, c_bool, POINTER(c_void_p))
_fn("tr_chat_tokenize", S, P, c_int, POINTER(ChatMessage), c_size_t, c_bool, c_bool, I32P, c_int32, I32P)
# routers
_fn("tr_policy_from_name", S, c_char_p, POINTER(c_int))
_fn("tr_policy_name", c_char_p, c_int)
_fn("tr_router_create", S, c_int, POINTER(P))
_fn("tr_router_load", S, c_char_p, POINTER(ModelInfoC), POINTER(P))
_fn("tr_router_free", None, P)
_fn("tr_router_policy", c_int, P)
_fn("tr_router_default_tau", c_float, P)
_fn("tr_router_set_threads", S, P, c_int32)
_fn("tr_router_score", S, P, F32P, c_int32, F32P, c_int32, F32P)
_fn("tr_router_score_at", S, P, c_int64, F32P, c_int32, F32P, c_int32, F32P)
_fn("tr_router_observe", S, P, c_int64, F32P, c_int32, F32P, c_int32)
_fn("tr_router_reset", None, P)
_fn("tr_router_tokens", S, P, I32P, c_int64)
_fn("tr_router_context", c_int32, P)
_fn("tr_router_write_mlp", S, POINTER(MlpRouterDesc), c_char_p)
_fn("tr_router_features", c_uint, P)
_fn("tr_router_topk", c_int32, P)
_fn("tr_router_feature_width", c_int32, c_uint, c_int32, c_int32)
_fn("tr_router_set_slm", S, P, P)
_fn("tr_router_features_parse", S, c_char_p, POINTER(c_uint))
_fn("tr_router_feature_name", c_char_p, c_uint)
# LLM backends
_fn("tr_llm_backend_embedded", S, P, POINTER(ContextParams), POINTER(SamplerParams), POINTER(P))
_fn("tr_remote_default_params", RemoteParams)
for _kind in ("server", "openai", "llamacpp", "sglang"):
    _fn("tr_llm_backend_" + _kind, S, POINTER(RemoteParams), POINTER(P))
_fn("tr_llm_backend_free", None, P)
_fn("tr_llm_backend_set_rtt", None, P, c_double)
_fn("tr_llm_backend_set_allowed", None, P, c_int32)
_fn("tr_llm_backend_set_breaker", None, P, c_int32, c_int32)
_fn("tr_llm_backend_n_vocab", c_int32, P)
_fn("tr_llm_backend_n_ctx", c_int32, P)
_fn("tr_llm_backend_stats", LlmStats, P)
_fn("tr_llm_backend_name", c_char_p, P)
_fn("tr_llm_next_token_ex", S, P, I32P, c_int32, I32P, F32P)
# routed generation
_fn("tr_route_default_params", RouteParams)
_fn("tr_route_mode_from_name", S, c_char_p, POINTER(c_int))
_fn("tr_route_generate", S, P, P, P, I32P, c_int32, POINTER(RouteParams), I32P, c_int32, POINTER(RouteStats))
# collected data
_fn("tr_train_data_open", S, c_char_p, POINTER(P))
_fn("tr_train_data_add", S, P, c_char_p)
_fn("tr_train_data_free", None, P)
_fn("tr_train_data_get_info", TrainDataInfo, P)
_fn("tr_train_data_position", S, P, c_int64, POINTER(TrainPosition))
_fn("tr_label_mode_from_name", S, c_char_p, POINTER(c_int))
_fn("tr_train_data_labels", S, P, c_int, F32P)
_fn("tr_train_data_inputs", S, P, c_uint, c_int32, P, c_int64, c_int64, F32P)
_fn("tr_train_data_scores", S, P, P, F32P)
_fn("tr_calibrate", S, P, P, c_double, F32P, POINTER(c_double))
_fn("tr_train_gap", S, P, P, POINTER(c_double), c_int32, POINTER(GapPoint), POINTER(GapReport))

libc = ctypes.CDLL(None)
libc.free.argtypes = [c_void_p]
libc.free.restype = None


def last_error() -> str:
    msg = lib.tr_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status: int) -> None:
    """Raises Error with the calling thread's last message when status is not TR_OK."""
    if status != 0:
        raise Error(status, last_error())


def take_string(ptr: c_void_p) -> str:
    """Copies a malloc'ed NUL-terminated string the library returned, then frees it."""
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        libc.free(ptr)


def encode(s: str | os.PathLike | None) -> bytes | None:
    if s is None:
        return None
    return os.fsencode(s) if isinstance(s, os.PathLike) else s.encode("utf-8")


def enum_from_name(fn, name: str, what: str) -> int:
    out = c_int()
    status = fn(encode(name), ctypes.byref(out))
    check(status)
    return out.value
