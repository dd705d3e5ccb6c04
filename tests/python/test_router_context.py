"""A router with context from Python: Router.score reads the previous position it scored or observed, reset()
forgets it (a new sequence starts from zeros, as training reads positions before an example's first), observe()
shows a position without scoring it, and position= rolls back. Checked against the network computed here in NumPy
on a router written with random weights (no features: the inputs are the hidden states alone)."""
import numpy as np
import pytest

import tokroute

N_EMBD, N_VOCAB = 32, 512


def network(weights, biases, x):
    h = x
    for i, (w, b) in enumerate(zip(weights, biases)):
        h = w @ h + b
        if i + 1 < len(weights):
            h = np.maximum(h, 0)
    return float(1 / (1 + np.exp(-h[0])))


@pytest.fixture()
def context_router(tmp_path):
    rng = np.random.default_rng(5)
    weights = [rng.normal(scale=0.5, size=(8, 2 * N_EMBD)).astype(np.float32),
               rng.normal(scale=0.5, size=(1, 8)).astype(np.float32)]
    biases = [rng.normal(size=8).astype(np.float32), np.zeros(1, np.float32)]
    path = tmp_path / "ctx.gguf"
    tokroute.write_mlp_router(path, weights, biases, features="none", topk=0, tau=0.5, slm_name="x",
                              slm_n_embd=N_EMBD, slm_n_vocab=N_VOCAB, context=1)
    return path, weights, biases, rng.normal(size=(3, N_EMBD)).astype(np.float32)


def test_scores_read_the_previous_position_and_reset_forgets_it(context_router):
    path, weights, biases, (a, b, c) = context_router
    logits = np.zeros(N_VOCAB, np.float32)
    zero = np.zeros(N_EMBD, np.float32)
    want = lambda cur, prev: network(weights, biases, np.concatenate([cur, prev]))
    with tokroute.Router.load(path) as router:
        assert router.context == 1
        assert router.score(a, logits) == pytest.approx(want(a, zero), abs=1e-5)
        assert router.score(b, logits) == pytest.approx(want(b, a), abs=1e-5)  # position 2 reads position 1
        assert abs(want(b, a) - want(b, zero)) > 1e-3  # the previous position matters: the test can fail
        assert router.score(c, logits, position=2) == pytest.approx(want(c, a), abs=1e-5)  # rolled back
        router.reset()
        assert router.score(b, logits) == pytest.approx(want(b, zero), abs=1e-5)  # a new sequence: zeros
        router.reset()
        router.observe(1, c, logits)
        assert router.score(a, logits, position=2) == pytest.approx(want(a, c), abs=1e-5)
