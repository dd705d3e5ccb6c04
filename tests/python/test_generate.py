"""Routed generation from Python equals `tokroute generate`'s, token for token with the same routed positions
(greedy), for a policy and a router file, with the LLM embedded and behind a real `tokroute serve`; the model,
vocabulary and chat-template calls answer as the CLI's do."""
import json
import threading
import time

import pytest

import tokroute
from conftest import LLM, PROMPT, SLM, run_cli

N_PREDICT = 64


def cli_generation(tmp_path, llm_args, routing_args, tau, extra=()):
    trace = tmp_path / "trace.jsonl"
    tau_args = ["--threshold", tau] if tau is not None else []
    run_cli("generate", "--slm", SLM, *llm_args, *routing_args, *tau_args, "-p", PROMPT, "-n", N_PREDICT, "--ids",
            "--no-summary", "--trace", trace, "-t", "1", *extra)
    rows = [json.loads(l) for l in trace.read_text().splitlines()]
    return [r["id"] for r in rows], [r["index"] for r in rows if r["source"] == "llm"]


@pytest.mark.parametrize("where", ["embedded", "server"])
@pytest.mark.parametrize("routing", ["policy", "router"])
def test_greedy_routed_generation_equals_the_cli(models, c_router, server, tmp_path, where, routing):
    slm, big = models
    tau = 0.8 if routing == "policy" else 0.45
    if routing == "policy":
        router, routing_args = tokroute.Router.policy("margin"), ["--policy", "margin"]
    else:
        router, routing_args = tokroute.Router.load(c_router, slm=slm), ["--router", c_router]
    llm_args = ["--llm", LLM] if where == "embedded" else ["--server", server.url]
    ids, routed = cli_generation(tmp_path, llm_args, routing_args, tau)
    with slm.context(n_threads=1) as ctx, router, \
            (tokroute.LLM.embedded(big, n_threads=1) if where == "embedded" else tokroute.LLM.server(server.url)) as llm:
        g = ctx.generate(PROMPT, router=router, llm=llm, tau=tau, n_predict=N_PREDICT)
        tokens = list(g)
    assert [t.id for t in tokens] == ids
    assert [t.index for t in tokens if t.routed] == routed
    assert 3 <= len(routed) <= N_PREDICT - 3  # both models' tokens appear: the comparison means something
    assert g.stats.n_tokens == len(ids) and g.stats.n_routed == len(routed)
    assert all(t.llm_ms > 0 for t in tokens if t.routed) and all(t.llm_ms == 0 for t in tokens if not t.routed)
    assert all(t.score is not None and 0 <= t.score <= 1 and t.tau == pytest.approx(tau) for t in tokens)
    assert all((t.score < t.tau) == t.routed for t in tokens)
    assert g.text == slm.detokenize(ids, remove_leading_space=False)


def test_sampling_and_stop_strings_equal_the_cli(models, tmp_path):
    slm, _ = models
    ids, _ = cli_generation(tmp_path, [], [], None, ["--temp", "0.9", "--seed", "7"])
    with slm.context(n_threads=1) as ctx:
        g = ctx.generate(PROMPT, n_predict=N_PREDICT, temperature=0.9, seed=7).run()
        assert g.ids == ids and not g.routed_positions
        cut = ctx.generate(PROMPT, n_predict=N_PREDICT, temperature=0.9, seed=7, stop=[" the"]).run()
    assert cut.stats.stopped_by_string and " the" not in cut.text and len(cut.ids) < len(ids)


def test_cli_rejects_routing_flags_we_mirror(models):
    """Without an LLM only the slm mode exists, as in the CLI."""
    slm, _ = models
    with slm.context(n_threads=1) as ctx, pytest.raises(tokroute.Error, match="needs an LLM"):
        ctx.generate(PROMPT, mode="joint")


def test_llm_mode_and_hiding_give_the_same_tokens(models):
    slm, big = models
    with slm.context(n_threads=1) as ctx, tokroute.LLM.embedded(big, n_threads=1) as llm:
        only = ctx.generate(PROMPT, llm=llm, mode="llm", n_predict=24).run()
        assert len(only.routed_positions) == len(only.ids) == only.stats.n_routed
        sync = ctx.generate(PROMPT, llm=llm, tau=0.8, n_predict=40).run()
        llm.set_rtt(2)
        hidden = ctx.generate(PROMPT, llm=llm, tau=0.8, n_predict=40, speculate_depth=8, lookahead=4).run()
    assert hidden.ids == sync.ids and hidden.routed_positions == sync.routed_positions


def test_tokenizer_and_chat(models):
    slm, _ = models
    ids = slm.tokenize(PROMPT)
    assert ids[0] == slm.vocab.bos
    assert run_cli("tokenize", "-m", SLM, "--ids", PROMPT).stdout.split() == [str(i) for i in ids]
    assert slm.detokenize(ids) == PROMPT
    assert b"".join(slm.vocab.token_to_piece(i) for i in ids[1:]).decode().strip() == PROMPT
    assert slm.info.n_embd == 32 and slm.info.n_vocab == 512
    text = tokroute.apply_chat_template("chatml", [{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert slm.vocab.chat_tokenize([{"role": "user", "content": "hi"}], template="chatml")[0] == slm.vocab.bos


def test_the_gil_is_released_while_c_works(models):
    """A Python thread keeps running while another waits in the library (here, a simulated 300 ms round trip)."""
    _, big = models
    ticks = []
    with tokroute.LLM.embedded(big, n_threads=1) as llm:
        llm.set_rtt(300)
        t = threading.Thread(target=llm.next_token, args=([1, 403],))
        t.start()
        while t.is_alive():
            ticks.append(time.monotonic())
            time.sleep(0.001)
        t.join()
    assert len(ticks) > 50


def test_leaving_a_loop_stops_the_generation(models):
    """break ends the worker at once (the Generation is dropped), so the context is free for the next generation,
    which gives what a fresh context gives; closing a context stops a generation running on it."""
    slm, big = models
    with slm.context(n_threads=1) as ctx, tokroute.LLM.embedded(big, n_threads=1) as llm:
        llm.set_rtt(20)
        for tok in ctx.generate(PROMPT, llm=llm, mode="llm", n_predict=500, stop_at_eog=False):
            if tok.index == 2:
                break
        assert not any(t.name == "tokroute-generate" for t in threading.enumerate())
        llm.set_rtt(0)
        again = ctx.generate(PROMPT, llm=llm, tau=0.8, n_predict=32).run()
        g = ctx.generate(PROMPT, llm=llm, mode="llm", n_predict=500, stop_at_eog=False)
        next(g)
        assert g.running
        ctx.close()  # stops the generation first, then frees the context
        assert not g.running and g.stats.n_tokens < 500 and list(g) == []
        with pytest.raises(tokroute.Error, match="closed"):
            ctx.generate(PROMPT, llm=llm).run()
    with slm.context(n_threads=1) as fresh, tokroute.LLM.embedded(big, n_threads=1) as llm:
        assert fresh.generate(PROMPT, llm=llm, tau=0.8, n_predict=32).run().ids == again.ids
