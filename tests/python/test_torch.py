"""A router trained in PyTorch and exported to tokroute's router file: the C library's scores equal PyTorch's within
1e-5 on the same inputs; it closes the same share of the SLM-to-LLM gap (within 1 point) as train-router with the
same architecture, labels and data on held-out data; `tokroute generate --router` and Python load and route with
it identically; C-trained files load in Python."""
import json

import numpy as np
import pytest
import torch

import tokroute
import tokroute.torch as trt
from conftest import LLM, PROMPT, SLM, run_cli

FEATURES = "maxprob,entropy,margin,topk"
TARGETS = (0.05, 0.1, 0.2)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def trained(collected, tmp_path_factory):
    with tokroute.TrainData(collected["train"]) as data:
        model = trt.train(data, features=FEATURES, topk=8, hidden=(16,), labels="expected", seed=1)
    path = tmp_path_factory.mktemp("torch") / "torch_router.gguf"
    trt.export(model, path, n_embd=32, n_vocab=512, slm_name="stories-student-32x3", tau=0.45)
    return model, path


def test_c_scores_equal_pytorch(trained, collected, models):
    model, path = trained
    slm, _ = models
    with tokroute.TrainData(collected["eval"]) as data, tokroute.Router.load(path, slm=slm) as router:
        assert router.features == ["maxprob", "entropy", "margin", "topk_logprobs"] and router.topk == 8
        assert router.default_tau == pytest.approx(0.45)
        c_scores = data.scores(router)
        with torch.no_grad():
            t_scores = model(torch.from_numpy(data.inputs(FEATURES, 8))).numpy()
    assert np.abs(c_scores - t_scores).max() < 1e-5
    assert c_scores.std() > 0.05  # the scores vary: equality is not trivial


def test_hidden_only_router_scores_through_tr_router_score(tmp_path):
    """No features: tr_router_score on raw hidden states (any logits) equals the network in PyTorch."""
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    model = trt.MLPRouter(32, (8, 4), features=[], topk=0, mean=rng.normal(size=32), std=rng.uniform(0.5, 2, 32))
    with torch.no_grad():  # spread the untrained network's scores away from 0.5
        for layer in model.layers:
            layer.weight.mul_(4)
    trt.export(model, tmp_path / "h.gguf", n_embd=32, n_vocab=512)
    x = rng.normal(size=(50, 32)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    with tokroute.Router.load(tmp_path / "h.gguf") as router:
        got = np.array([router.score(row, np.zeros(512, np.float32)) for row in x])
    assert np.abs(got - want).max() < 1e-5 and want.std() > 0.01


def test_closes_the_same_share_of_the_gap_as_train_router(trained, collected, c_router):
    _, path = trained
    with tokroute.TrainData(collected["eval"]) as held_out, tokroute.Router.load(path) as ours, \
            tokroute.Router.load(c_router) as theirs:
        a, b = held_out.gap(ours, TARGETS), held_out.gap(theirs, TARGETS)
    for pa, pb in zip(a.points, b.points):
        assert pa.routed == pytest.approx(pb.routed, abs=1e-3)
        assert abs(pa.gap_closed - pb.gap_closed) <= 0.01, (pa, pb)
        assert pa.gap_closed > 0.05  # the routers learned something: a better-than-nothing share
    assert a.slm_accuracy == b.slm_accuracy and a.llm_accuracy == b.llm_accuracy


def test_exported_router_routes_in_the_cli_as_in_python(trained, models, tmp_path):
    _, path = trained
    slm, big = models
    trace = tmp_path / "t.jsonl"
    run_cli("generate", "--slm", SLM, "--llm", LLM, "--router", path, "-p", PROMPT, "-n", 48, "--ids",
            "--no-summary", "--trace", trace, "-t", "1")
    rows = [json.loads(l) for l in trace.read_text().splitlines()]
    with slm.context(n_threads=1) as ctx, tokroute.Router.load(path, slm=slm) as router, \
            tokroute.LLM.embedded(big, n_threads=1) as llm:
        g = ctx.generate(PROMPT, router=router, llm=llm, n_predict=48).run()  # tau: the file's 0.45
    assert g.ids == [r["id"] for r in rows]
    assert g.routed_positions == [r["index"] for r in rows if r["source"] == "llm"]
    assert len(g.routed_positions) > 0


def test_c_trained_router_loads_in_python(c_router, models):
    slm, _ = models
    with tokroute.Router.load(c_router, slm=slm) as r:
        assert r.policy_name == "mlp" and r.features == ["maxprob", "entropy", "margin", "topk_logprobs"]
