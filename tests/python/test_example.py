"""examples/train_router_torch.py runs as documented (at a small scale): collect, train in PyTorch, export,
calibrate, compare with train-router and evaluate with `tokroute eval` using the exported file."""
import json
import subprocess
import sys

from conftest import CLI, ROOT, SHARED


def test_example_trains_exports_and_evaluates(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "train_router_torch.py"), "--cli", str(CLI),
                        "--shared", str(SHARED), "--train-range", "0:40", "--eval-range", "40:60", "--epochs", "3",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "tokroute eval: SLM accuracy" in p.stdout and "router at 10% routed" in p.stdout
    report = json.loads((tmp_path / "eval-report" / "eval.json").read_text())
    assert "router" in report["policies"]
    assert (tmp_path / "torch_router.gguf").stat().st_size > 0
