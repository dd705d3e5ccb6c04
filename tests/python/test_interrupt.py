"""Ctrl-C during a generation from Python stops it cleanly: the program gets KeyboardInterrupt within moments, the
generation's worker ends through the library's abort callback, and the `tokroute serve` session is deleted when
the LLM closes — no session is left on the server."""
import os
import signal
import subprocess
import sys
import time

from conftest import ROOT, SLM, active_sessions

SCRIPT = r"""
import sys, tokroute
slm = tokroute.Model(sys.argv[1])
try:
    with slm.context(n_threads=1) as ctx, tokroute.LLM.server(sys.argv[2]) as llm:
        llm.set_rtt(40)  # each routed token takes a while: the interrupt lands mid-generation
        for tok in ctx.generate("Once upon a time", llm=llm, mode="llm", n_predict=400, stop_at_eog=False):
            print("token", tok.index, flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print("finished", flush=True)
"""


def test_interrupt_leaves_no_session(server):
    before = active_sessions(server.url)  # other tests' OpenAI-compatible calls may leave a cached prefix
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(SLM), server.url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        for _ in range(5):  # a few tokens in: the session exists now
            line = proc.stdout.readline()
            assert line.startswith("token"), line + proc.stderr.read()
        assert active_sessions(server.url) == before + 1
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert out.strip().endswith("interrupted") and "finished" not in out
    assert took < 5
    assert active_sessions(server.url) == before
