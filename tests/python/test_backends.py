"""The remote backends other than --server answer from Python as the embedded LLM does: LLM.openai against `tokroute
serve`'s /v1/completions and LLM.sglang against the SGLang protocol peer (tests/support/sglang_peer.py, which runs
the real model through `tokroute logits`) give the same greedy routed generation, token for token."""
import subprocess
import sys

import pytest

import tokroute
from conftest import CLI, LLM, PROMPT, ROOT


@pytest.fixture(scope="module")
def sglang_peer():
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "sglang_peer.py"), str(CLI), str(LLM)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()  # "PORT PID" once listening
        assert line.strip(), "the SGLang peer did not start"
        yield f"http://127.0.0.1:{line.split()[0]}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def routed(ctx, llm):
    g = ctx.generate(PROMPT, router=tokroute.Router.policy("margin"), llm=llm, tau=0.8, n_predict=24).run()
    return g.ids, g.routed_positions


def test_openai_and_sglang_backends_equal_the_embedded_llm(models, server, sglang_peer):
    slm, big = models
    with slm.context(n_threads=1) as ctx:
        with tokroute.LLM.embedded(big, n_threads=1) as llm:
            want = routed(ctx, llm)
        assert len(want[1]) >= 3
        with tokroute.LLM.openai(server.url) as llm:
            assert routed(ctx, llm) == want
            assert llm.stats.calls >= len(want[1]) and llm.name
        with tokroute.LLM.sglang(sglang_peer) as llm:
            assert routed(ctx, llm) == want
            assert llm.stats.calls >= len(want[1])
