"""Failures raise tokroute.Error carrying the library's status and message — the message the CLI prints for the
same mistake: a missing file, a router trained for another SLM, a dead server."""
import pytest

import tokroute
from conftest import LLM, PROMPT, SLM, free_port, run_cli


def cli_error(*args) -> str:
    p = run_cli(*args, check=False)
    assert p.returncode != 0
    return p.stderr


def test_missing_model_file(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(tokroute.Error) as e:
        tokroute.Model(missing)
    assert e.value.status == "io" and str(missing) in e.value.message
    assert e.value.message in cli_error("generate", "-m", missing, "-p", PROMPT)


def test_missing_router_and_collect_folder(tmp_path):
    with pytest.raises(tokroute.Error) as e:
        tokroute.Router.load(tmp_path / "r.gguf")
    assert e.value.status == "io"
    with pytest.raises(tokroute.Error) as e:
        tokroute.TrainData(tmp_path / "data")
    assert e.value.status == "io" and "collected data" in e.value.message


def test_router_for_another_slm(models, c_router):
    """The router was trained on the student's states (n_embd 32); loading it for the 64-wide model fails."""
    _, big = models
    with pytest.raises(tokroute.Error) as e:
        tokroute.Router.load(c_router, slm=big)
    assert e.value.status == "arg" and e.value.message
    assert e.value.message in cli_error("generate", "--slm", LLM, "--llm", LLM, "--router", c_router, "-p", PROMPT)


def test_dead_server(models):
    slm, _ = models
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with slm.context(n_threads=1) as ctx, tokroute.LLM.server(url, timeout_ms=500, retries=0) as llm:
        with pytest.raises(tokroute.Error) as e:
            ctx.generate(PROMPT, llm=llm, mode="llm", n_predict=4).run()
    assert e.value.status == "network" and "127.0.0.1" in e.value.message
    with slm.context(n_threads=1) as ctx, tokroute.LLM.server(url, timeout_ms=500, retries=0) as llm:
        # the default (fallback): routed tokens become the SLM's, marked, and the run completes
        g = ctx.generate(PROMPT, llm=llm, tau=0.9, n_predict=8).run()
    assert g.stats.n_fallback > 0 and any(t.llm_unavailable for t in g.tokens)


def test_closed_objects_and_bad_arguments(models):
    slm, _ = models
    ctx = slm.context(n_threads=1)
    ctx.close()
    with pytest.raises(tokroute.Error, match="closed"):
        ctx.generate(PROMPT).run()
    with pytest.raises(tokroute.Error) as e:
        tokroute.Router.policy("coin-flip")
    assert e.value.status == "arg" and "coin-flip" in e.value.message
