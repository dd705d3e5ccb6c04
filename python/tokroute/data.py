"""Collected data (`tokroute collect`'s folders) in Python.

open_collected(dir) maps positions.bin as a NumPy structured array (np.memmap: nothing is read until used) with
named fields — the record layout of docs/train.md ("Files"): ids (truth, slm_top1, llm_top1), probabilities, the
SLM's logit statistics (maxprob, entropy, margin), rollout counts, topk_logprobs [topk] and hidden [n_embd]. Only
the records that index.bin lists count (an interrupted collect may leave a tail).

TrainData(dir, ...) is the library's own reader (tr_train_data_open: every value validated), what `train-router`
trains on: the labels of a label mode, the router's input rows, a router's scores, calibration and the gap report.
"""
from __future__ import annotations

import os
from ctypes import byref, c_double, c_float, c_void_p
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from . import _lib
from ._handle import Handle
from ._lib import Error, check, encode, lib
from .model import Model
from .router import Router, parse_features

MAGIC, INDEX_MAGIC, HEADER_BYTES, FIXED_BYTES = b"TRCOLLCT", b"TRCINDEX", 512, 64
FORMATS = ["text", "llm-sample", "csqa", "gsm8k", "arc", "mmlu", "text-continue"]
LABEL_MODES = ["drop", "slm", "rollout", "llm", "gain", "expected", "mixed"]

# The fixed part of a record (docs/train.md): offsets 0..63, little-endian.
_FIXED_FIELDS = [("example", "<u4"), ("position", "<u4"), ("truth", "<i4"), ("slm_top1", "<i4"), ("llm_top1", "<i4"),
                 ("slm_p_top1", "<f4"), ("llm_p_top1", "<f4"), ("slm_p_truth", "<f4"), ("llm_p_truth", "<f4"),
                 ("maxprob", "<f4"), ("entropy", "<f4"), ("margin", "<f4"), ("rollout_slm", "<i4"),
                 ("rollout_llm", "<i4"), ("llm_p_slm_top1", "<f4"), ("slm_p_llm_top1", "<f4")]


def record_dtype(topk: int, n_embd: int) -> np.dtype:
    """The dtype of one positions.bin record for a folder's topk and n_embd."""
    return np.dtype(_FIXED_FIELDS + [("topk_logprobs", "<f4", (topk,)), ("hidden", "<f4", (n_embd,))])


@dataclass(frozen=True)
class CollectHeader:
    """positions.bin's header (docs/train.md)."""
    version: int
    record_bytes: int
    n_embd: int
    n_vocab: int
    topk: int
    rollouts: int
    format: str
    round: int
    max_tokens: int
    first: int
    last: int
    seed: int
    data_hash: int
    llm_n_embd: int
    prompt_tokens: int
    tau: float
    chat_template: int
    llm_topk: int
    slm_name: str
    llm_name: str
    slm_path: str


def _cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def read_header(path) -> CollectHeader:
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if len(raw) < HEADER_BYTES or raw[:8] != MAGIC:
        raise Error(3, f"{path}: not a tokroute collect file (bad magic)")
    u = np.frombuffer(raw, "<u4", 12, 8)
    i = np.frombuffer(raw, "<i4", 2, 48)
    if u[0] != 1 or u[1] != HEADER_BYTES:
        raise Error(3, f"{path}: unsupported collect version {u[0]} or header size {u[1]}")
    fmt = int(u[7])
    return CollectHeader(
        version=int(u[0]), record_bytes=int(u[2]), n_embd=int(u[3]), n_vocab=int(u[4]), topk=int(u[5]),
        rollouts=int(u[6]), format=FORMATS[fmt] if fmt < len(FORMATS) else str(fmt), round=int(u[8]),
        max_tokens=int(u[9]), first=int(i[0]), last=int(i[1]),
        seed=int(np.frombuffer(raw, "<u8", 1, 56)[0]), data_hash=int(np.frombuffer(raw, "<u8", 1, 64)[0]),
        llm_n_embd=int(np.frombuffer(raw, "<u4", 1, 72)[0]), prompt_tokens=int(np.frombuffer(raw, "<u4", 1, 76)[0]),
        tau=float(np.frombuffer(raw, "<f4", 1, 80)[0]), chat_template=int(np.frombuffer(raw, "<u4", 1, 84)[0]),
        llm_topk=int(np.frombuffer(raw, "<u4", 1, 88)[0]), slm_name=_cstr(raw[96:160]),
        llm_name=_cstr(raw[160:224]), slm_path=_cstr(raw[224:480]))


class CollectedData:
    """A collect folder as NumPy arrays (memory-mapped, read-only).

    records: the structured array, one entry per position (fields as record_dtype); the fields are also
    attributes (data.truth, data.hidden [n, n_embd], data.topk_logprobs [n, topk], ...). examples: index.bin's
    entries as an array of (example, n_positions, offset)."""

    def __init__(self, folder):
        self.folder = os.fspath(folder)
        positions = os.path.join(self.folder, "positions.bin")
        self.header = read_header(positions)
        h = self.header
        dtype = record_dtype(h.topk, h.n_embd)
        if dtype.itemsize != h.record_bytes:
            raise Error(3, f"{positions}: record bytes {h.record_bytes}, expected {dtype.itemsize}")
        with open(os.path.join(self.folder, "index.bin"), "rb") as f:
            index = f.read()
        if index[:8] != INDEX_MAGIC:
            raise Error(3, f"{self.folder}/index.bin: not a tokroute collect index (bad magic)")
        n_entries = (len(index) - 8) // 16
        self.examples = np.frombuffer(index, np.dtype([("example", "<u4"), ("n_positions", "<u4"),
                                                       ("offset", "<u8")]), n_entries, 8)
        n = int(self.examples["n_positions"].sum())
        size = os.path.getsize(positions)
        if HEADER_BYTES + n * dtype.itemsize > size:
            raise Error(3, f"{positions}: the index lists {n} positions, the file holds fewer")
        self.records = (np.memmap(positions, dtype=dtype, mode="r", offset=HEADER_BYTES, shape=(n,)) if n
                        else np.zeros(0, dtype))

    def __len__(self) -> int:
        return len(self.records)

    @property
    def fields(self) -> list[str]:
        return list(self.records.dtype.names)

    def __getattr__(self, name: str):
        if name != "records" and name in self.records.dtype.names:
            return self.records[name]
        raise AttributeError(name)

    def inputs(self, features="maxprob,entropy,margin,topk", topk: int = 8) -> np.ndarray:
        """The router's input rows [n, n_embd + width]: the hidden state, then the chosen features in their order
        (maxprob, entropy, margin, the top-k log-probs) — what tr_train_data_inputs builds from the same records.
        The token_embedding feature reads the SLM's weights: use TrainData.inputs(..., slm=model)."""
        bits = parse_features(features)
        if bits & 16:
            raise Error(1, "the token_embedding feature needs the SLM: TrainData.inputs(..., slm=model)")
        cols = [self.records["hidden"]]
        for bit, name in ((1, "maxprob"), (2, "entropy"), (4, "margin")):
            if bits & bit:
                cols.append(self.records[name][:, None])
        if bits & 8:
            if not 1 <= topk <= self.header.topk:
                raise Error(1, f"topk {topk} is outside 1..{self.header.topk} (the data's)")
            cols.append(self.records["topk_logprobs"][:, :topk])
        return np.concatenate(cols, axis=1).astype(np.float32, copy=False)


def open_collected(folder) -> CollectedData:
    """Maps a collect folder (see CollectedData)."""
    return CollectedData(folder)


@dataclass(frozen=True)
class GapPoint:
    target_routed: float
    routed: float
    tau: float
    accuracy: float
    gap_closed: float


@dataclass(frozen=True)
class GapReport:
    slm_accuracy: float
    llm_accuracy: float
    oracle_accuracy: float
    points: list


class TrainData(Handle):
    """The library's reader of collected data (tr_train_data): one or several folders of the same SLM."""
    _free = lib.tr_train_data_free

    def __init__(self, folders):
        super().__init__()
        folders = [folders] if isinstance(folders, (str, os.PathLike)) else list(folders)
        ptr = c_void_p()
        check(lib.tr_train_data_open(encode(folders[0]), byref(ptr)))
        self._ptr = ptr.value
        for f in folders[1:]:
            check(lib.tr_train_data_add(self._ptr, encode(f)))

    @property
    def info(self) -> dict:
        i = lib.tr_train_data_get_info(self._handle())
        out = {f: getattr(i, f) for f, _ in _lib.TrainDataInfo._fields_}
        out["slm_name"] = (i.slm_name or b"").decode("utf-8", "replace")
        out["slm_path"] = (i.slm_path or b"").decode("utf-8", "replace")
        return out

    def __len__(self) -> int:
        return int(lib.tr_train_data_get_info(self._handle()).n_positions)

    def position(self, i: int) -> dict:
        """Position i as the reader loaded it (tr_train_position's fields)."""
        p = _lib.TrainPosition()
        check(lib.tr_train_data_position(self._handle(), i, byref(p)))
        return {f: getattr(p, f) for f, _ in _lib.TrainPosition._fields_}

    def labels(self, mode: str = "expected") -> np.ndarray:
        """Every position's training target under a label mode, as train-router uses it (-1: dropped)."""
        m = _lib.enum_from_name(lib.tr_label_mode_from_name, mode, "label mode")
        out = np.empty(len(self), np.float32)
        check(lib.tr_train_data_labels(self._handle(), m, out.ctypes.data_as(_lib.F32P)))
        return out

    def inputs(self, features="maxprob,entropy,margin,topk", topk: int = 8, slm: Optional[Model] = None,
               first: int = 0, count: Optional[int] = None) -> np.ndarray:
        """The router's input rows of positions [first, first + count) as train-router builds them."""
        bits = parse_features(features)
        n_embd = self.info["n_embd"]
        k = topk if bits & 8 else 0
        width = n_embd + lib.tr_router_feature_width(bits, k, n_embd)
        count = len(self) - first if count is None else count
        out = np.empty((max(count, 0), width), np.float32)
        check(lib.tr_train_data_inputs(self._handle(), bits, k, slm._handle() if slm else None, first, count,
                                       out.ctypes.data_as(_lib.F32P)))
        return out

    def scores(self, router: Router) -> np.ndarray:
        """The router's score on every position (from the stored hidden states and features), in data order."""
        out = np.empty(len(self), np.float32)
        check(lib.tr_train_data_scores(self._handle(), router._handle(), out.ctypes.data_as(_lib.F32P)))
        return out

    def calibrate(self, router: Router, target_routed: float) -> tuple[float, float]:
        """The τ that routes target_routed of the positions, and the share it routes."""
        tau, routed = c_float(), c_double()
        check(lib.tr_calibrate(router._handle(), self._handle(), target_routed, byref(tau), byref(routed)))
        return tau.value, routed.value

    def gap(self, router: Optional[Router], targets: Sequence[float] = (0.05, 0.1, 0.2)) -> GapReport:
        """Token accuracy when the lowest-scoring share is routed (router None: the oracle), per target share."""
        n = len(targets)
        t = (c_double * n)(*targets)
        pts = (_lib.GapPoint * n)()
        rep = _lib.GapReport()
        check(lib.tr_train_gap(self._handle(), router._handle() if router else None, t, n, pts, byref(rep)))
        points = [GapPoint(p.target_routed, p.routed, p.tau, p.accuracy, p.gap_closed) for p in pts]
        return GapReport(rep.slm_accuracy, rep.llm_accuracy, rep.oracle_accuracy, points)
