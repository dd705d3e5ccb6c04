"""Routers with per-sequence state from Python. With context: Router.score reads the previous position it scored
or observed, reset() forgets it (a new sequence starts from zeros, as training reads positions before an example's
first), observe() shows a position without scoring it, and position= rolls back. Checked against the network
computed here in NumPy on a router written with random weights (no features: the inputs are the hidden states
alone). With induction: Router.tokens gives the sequence, the score reads its 7 values (recomputed here) and
follows a rollback."""
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


def induction_values(tok, p, top1):
    """The induction feature's 7 values for position p (docs/train.md, Features), computed here independently."""
    best, bq, occ = 0, -1, 0
    for q in range(p - 2, 0, -1):
        if tok[q] != tok[p - 1]:
            continue
        occ += 1
        m = 1
        while m < 8 and q - m >= 1 and tok[q - m] == tok[p - 1 - m]:
            m += 1
        if m > best:
            best, bq = m, q
    found = bq >= 1
    same = found and tok[bq + 1] == top1
    return np.array([found, best / 8, best >= 2, same, found and not same,
                     np.log1p(p - 1 - bq) if found else 0, np.log1p(occ)], np.float32)


def test_an_induction_router_reads_the_tokens_it_is_given(tmp_path):
    rng = np.random.default_rng(7)
    weights = [rng.normal(scale=0.5, size=(8, N_EMBD + 7)).astype(np.float32),
               rng.normal(scale=0.5, size=(1, 8)).astype(np.float32)]
    biases = [rng.normal(size=8).astype(np.float32), np.zeros(1, np.float32)]
    path = tmp_path / "induction.gguf"
    tokroute.write_mlp_router(path, weights, biases, features="induction", topk=0, tau=0.5, slm_name="x",
                              slm_n_embd=N_EMBD, slm_n_vocab=N_VOCAB)
    h = rng.normal(size=N_EMBD).astype(np.float32)
    logits = np.zeros(N_VOCAB, np.float32)
    logits[7] = 1.0  # the SLM's top-1: 7
    tok = [1, 5, 6, 7, 5, 6]  # position 6 reads 6, which followed 5 before, as now: a repeat of "5 6" -> 7
    want = lambda toks, p: network(weights, biases, np.concatenate([h, induction_values(toks, p, 7)]))
    with tokroute.Router.load(path) as router:
        with pytest.raises(tokroute.Error, match="tr_router_tokens"):
            router.score(h, logits, position=6)  # no tokens given yet
        router.tokens(tok)
        assert router.score(h, logits, position=6) == pytest.approx(want(tok, 6), abs=1e-5)
        other = [1, 5, 6, 7, 5, 9]  # the branch rolled back and went elsewhere: no earlier 9
        router.tokens(other)
        assert router.score(h, logits, position=6) == pytest.approx(want(other, 6), abs=1e-5)
        assert abs(want(tok, 6) - want(other, 6)) > 1e-3  # the tokens matter: the test can fail
