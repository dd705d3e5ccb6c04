"""A collect folder opened as NumPy arrays (memory-mapped, named fields) holds exactly what the library's reader —
what train-router trains on — loads from it, spot-checked field by field; the header matches the reader's info."""
import numpy as np
import pytest

import tokroute
from tokroute.data import record_dtype

FEATURES = "maxprob,entropy,margin,topk"


def spots(n):
    return sorted({0, 1, n // 3, n // 2, n - 2, n - 1, *range(5, n, 997)})


def test_collected_arrays_equal_the_c_reader(collected):
    arrays = tokroute.open_collected(collected["train"])
    with tokroute.TrainData(collected["train"]) as reader:
        info = reader.info
        assert isinstance(arrays.records, np.memmap)
        assert len(arrays) == info["n_positions"] == len(reader) > 20000
        h = arrays.header
        assert (h.n_embd, h.n_vocab, h.topk, h.format) == (info["n_embd"], info["n_vocab"], info["topk"], "text")
        assert h.slm_name == info["slm_name"] and h.slm_path == info["slm_path"]
        assert len(arrays.examples) == info["n_examples"] == 120
        assert int((arrays.slm_top1 == arrays.truth).sum()) == info["slm_correct"]
        assert int((arrays.llm_top1 == arrays.truth).sum()) == info["llm_correct"]
        for i in spots(len(arrays)):
            c = reader.position(i)
            r = arrays.records[i]
            for name in ("example", "position", "truth", "slm_top1", "llm_top1", "rollout_slm", "rollout_llm"):
                assert int(r[name]) == c[name], (i, name)
            for name in ("slm_p_top1", "llm_p_top1", "slm_p_truth", "llm_p_truth", "llm_p_slm_top1",
                         "slm_p_llm_top1", "maxprob", "entropy", "margin"):
                assert np.float32(r[name]) == np.float32(c[name]), (i, name)
        # the router's input rows: hidden state then features, bit for bit
        rows = arrays.inputs(FEATURES, topk=8)
        for i in spots(len(arrays)):
            assert np.array_equal(rows[i], reader.inputs(FEATURES, 8, first=i, count=1)[0])
        assert np.array_equal(rows[:, :h.n_embd], arrays.hidden)
        assert np.array_equal(rows[:, -8:], arrays.topk_logprobs[:, :8])


def test_ngram_is_known_and_refused_by_name(collected):
    # parse_features knows every feature (the C parser's names); TrainData.inputs does not give ngram's values,
    # which are leave-one-example-out over the whole training set (train-router computes them), and says so.
    from tokroute.router import FEATURES as BITS, feature_names, parse_features
    assert parse_features("maxprob,induction,ngram") == BITS["maxprob"] | BITS["induction"] | BITS["ngram"] == 97
    assert feature_names(parse_features("topk,ngram")) == ["topk_logprobs", "ngram"]
    with tokroute.TrainData(collected["train"]) as reader:
        with pytest.raises(tokroute.Error, match="the ngram feature is not given here"):
            reader.inputs("maxprob,ngram", 8, first=0, count=1)


def test_labels_come_from_the_library(collected):
    with tokroute.TrainData(collected["train"]) as reader:
        arrays = tokroute.open_collected(collected["train"])
        drop = reader.labels("drop")
        slm_right = arrays.slm_top1 == arrays.truth
        llm_only = ~slm_right & (arrays.llm_top1 == arrays.truth)
        assert np.all(drop[slm_right] == 1) and np.all(drop[llm_only] == 0)
        assert np.all(drop[~slm_right & ~llm_only] == -1)
        expected = reader.labels("expected")
        assert expected.min() >= 0 and expected.max() <= 1 and len(np.unique(expected)) > 100
        with pytest.raises(tokroute.Error, match="unknown label mode"):
            reader.labels("coin")


def test_record_layout_is_the_documented_one():
    dt = record_dtype(16, 32)
    assert dt.itemsize == 64 + 4 * (16 + 32)
    assert [dt.fields[n][1] for n in ("truth", "maxprob", "rollout_slm", "llm_p_slm_top1", "topk_logprobs",
                                      "hidden")] == [8, 36, 48, 56, 64, 128]
