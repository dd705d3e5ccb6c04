"""Fixtures of the Python package's tests: the CLI, the demo models (../shared), collected data (collected once per
run with `tokroute collect`), a router file `train-router` wrote, and a real `tokroute serve` on a free loopback
port. Paths come from CTest's environment (TOKROUTE_CLI, TOKROUTE_LAYOUT, TR_SHARED_DIR, TOKROUTE_LIBRARY), else
the checkout's build/ and ../shared. Anything missing fails the run; a skipped test fails it too."""
from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("TOKROUTE_CLI", ROOT / "build" / "tokroute"))
LAYOUT = Path(os.environ.get("TOKROUTE_LAYOUT", ROOT / "build" / "python_layout"))
SHARED = Path(os.environ.get("TR_SHARED_DIR", ROOT.parent / "shared"))
SLM = SHARED / "models" / "stories-student.gguf"
LLM = SHARED / "models" / "stories260K.gguf"
STORIES = SHARED / "data" / "tinystories" / "tinystories_val.txt"
PROMPT = "Once upon a time"

for _needed in (CLI, LAYOUT, SLM, LLM, STORIES):
    if not _needed.exists():
        raise RuntimeError(f"tests/python needs {_needed} (build the targets tokroute, tokroute_shared and "
                           f"python_layout; ../shared holds the models)")

_skipped = []


def pytest_runtest_logreport(report):
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if _skipped and session.exitstatus == 0:
        print(f"\nFAIL: skipped tests (a test that skips cannot fail): {_skipped}")
        session.exitstatus = 1


def run_cli(*args, check=True, timeout=300) -> subprocess.CompletedProcess:
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"tokroute {' '.join(map(str, args))} failed ({p.returncode}): {p.stderr}")
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def active_sessions(url: str) -> int:
    for line in http_get(url + "/metrics").splitlines():
        if line.startswith("tokroute_active_sessions "):
            return int(float(line.split()[1]))
    raise AssertionError("no tokroute_active_sessions in /metrics")


@pytest.fixture(scope="session")
def models():
    import tokroute
    with tokroute.Model(SLM) as slm, tokroute.Model(LLM) as llm:
        yield slm, llm


@pytest.fixture(scope="session")
def collected(tmp_path_factory):
    """Two collect folders of the demo pair: stories 0-119 (training) and 120-199 (held out)."""
    base = tmp_path_factory.mktemp("collect")
    out = {}
    for name, rng in (("train", "0:120"), ("eval", "120:200")):
        out[name] = base / name
        run_cli("collect", "--slm", SLM, "--llm", LLM, "--data", STORIES, "--format", "text", "--range", rng,
                "--out", out[name], "-t", "1")
    return out


@pytest.fixture(scope="session")
def c_router(collected, tmp_path_factory):
    """A router file train-router wrote (the recipe's features but the token embedding and the previous position,
    which the PyTorch trainer does not read, a small hidden layer)."""
    path = tmp_path_factory.mktemp("router") / "c_router.gguf"
    run_cli("train-router", "--data", collected["train"], "--out", path, "--hidden", "16", "--features",
            "maxprob,entropy,margin,topk", "--context", "0", "--labels", "expected", "-t", "1")
    return path


class Server:
    def __init__(self, proc, url):
        self.proc, self.url = proc, url


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """`tokroute serve` with the demo LLM on 127.0.0.1 (a free port)."""
    d = tmp_path_factory.mktemp("serve")
    ready, log = d / "ready", open(d / "serve.log", "w")
    proc = subprocess.Popen([str(CLI), "serve", "-m", str(LLM), "--host", "127.0.0.1", "--port", "0",
                             "--ready-file", str(ready), "-t", "1"], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            if ready.exists() and ready.read_text().strip():
                break
            if proc.poll() is not None:
                raise AssertionError("tokroute serve exited: " + (d / "serve.log").read_text())
            time.sleep(0.05)
        else:
            raise AssertionError("tokroute serve did not come up")
        yield Server(proc, ready.read_text().splitlines()[0].rstrip("/"))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
