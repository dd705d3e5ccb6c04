#!/usr/bin/env python3
"""train_router_torch.py — a CITER router trained in PyTorch, exported to tokroute's router file and evaluated with
`tokroute eval`, next to one `train-router` fits on the same data (README "Python").

  1. `tokroute collect` runs the training and held-out stories through both models (teacher forced);
  2. tokroute.torch.train fits an MLP on the collected arrays (the library's labels and input rows);
  3. tokroute.torch.export writes the router file, with the τ that routes --target-routed of the held-out positions;
  4. `tokroute eval --router` measures it against the policies, and tokroute.TrainData.gap compares it with the
     router `tokroute train-router` trains on the same data with the same architecture and labels.

Run from the checkout (after `make python`):
  .venv/bin/python examples/train_router_torch.py --out out/torch-router
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

import tokroute
import tokroute.torch as trt

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", default=str(ROOT / "build" / "tokroute"))
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"))
    ap.add_argument("--train-range", default="0:300")
    ap.add_argument("--eval-range", default="800:1000")
    ap.add_argument("--hidden", default="64", help="hidden widths, comma-separated ('none': logistic regression)")
    ap.add_argument("--labels", default="expected")
    ap.add_argument("--features", default="maxprob,entropy,margin,topk")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--target-routed", type=float, default=0.1)
    ap.add_argument("--out", default="out/torch-router")
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = Path(args.shared) / "models"
    slm_path, llm_path = models / "stories-student.gguf", models / "stories260K.gguf"
    stories = Path(args.shared) / "data" / "tinystories" / "tinystories_val.txt"
    pair = ["--slm", str(slm_path), "--llm", str(llm_path)]
    data = ["--data", str(stories), "--format", "text"]

    def cli(*a: str) -> str:
        return subprocess.run([args.cli, *a], check=True, capture_output=True, text=True).stdout

    # 1. collected data (resumable: a second run reuses it)
    for name, rng in (("train", args.train_range), ("eval", args.eval_range)):
        cli("collect", *pair, *data, "--range", rng, "--out", str(out / name), "-t", "1")

    # 2. train in PyTorch on the library's inputs and labels
    hidden = () if args.hidden == "none" else tuple(int(h) for h in args.hidden.split(","))
    torch.manual_seed(1)
    with tokroute.Model(slm_path) as slm, tokroute.TrainData(out / "train") as train_data, \
            tokroute.TrainData(out / "eval") as held_out:
        arrays = tokroute.open_collected(out / "train")
        print(f"collected: {len(arrays)} positions, fields {', '.join(arrays.fields)}")
        model = trt.train(train_data, features=args.features, hidden=hidden, labels=args.labels,
                          epochs=args.epochs, slm=slm)
        info = slm.info
        torch_file = out / "torch_router.gguf"
        # 3. export, then store the τ that routes the target share of the held-out positions
        trt.export(model, torch_file, n_embd=info.n_embd, n_vocab=info.n_vocab, slm_name=info.name)
        with tokroute.Router.load(torch_file, slm=slm) as router:
            tau, routed = held_out.calibrate(router, args.target_routed)
        trt.export(model, torch_file, n_embd=info.n_embd, n_vocab=info.n_vocab, slm_name=info.name, tau=tau)
        print(f"wrote {torch_file}: tau {tau:.4f} routes {100 * routed:.1f}% of the held-out positions")

        # the same recipe in C, for comparison
        c_file = out / "c_router.gguf"
        cli("train-router", "--data", str(out / "train"), "--out", str(c_file), "--hidden", args.hidden,
            "--features", args.features, "--labels", args.labels, "--epochs", str(args.epochs), "-t", "1")
        targets = (0.05, 0.1, 0.2)
        with tokroute.Router.load(torch_file) as ours, tokroute.Router.load(c_file) as theirs:
            a, b = held_out.gap(ours, targets), held_out.gap(theirs, targets)
        print("gap closed on the held-out data (PyTorch / train-router):")
        for pa, pb in zip(a.points, b.points):
            print(f"  {100 * pa.target_routed:4.0f}% routed: {100 * pa.gap_closed:5.1f}% / {100 * pb.gap_closed:5.1f}%")

    # 4. tokroute eval with the PyTorch router (token level and free-running generation)
    result = json.loads(cli("eval", *pair, *data, "--range", args.eval_range, "--router", str(torch_file),
                            "--json", "--out", str(out / "eval-report")))
    print(f"tokroute eval: SLM accuracy {result['slm_accuracy']:.4f}, LLM {result['llm_accuracy']:.4f}")
    for point in result["policies"]["router"]:
        print(f"  router at {100 * point['target_routed']:.0f}% routed: accuracy {point['accuracy']:.4f}, "
              f"gap closed {100 * point['gap_closed']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
