"""Routers trained in PyTorch and exported to tokroute's router file (import tokroute.torch; needs torch).

The network is the one the library runs (src/router/mlp.c, docs/train.md "Training"): standardized inputs, ReLU
hidden layers, one sigmoid output; the input is the SLM's final hidden state followed by the chosen features.
export() folds the standardization into the first layer and writes the file through tr_router_write_mlp, so
`tokroute generate --router`, tokroute.Router.load and every C caller load it like a file `train-router` wrote
(and Router.load reads C-trained files in Python the same way).

train() fits one the way train-router does — binary cross-entropy on the labels of a label mode (class-weighted
for the hard modes), Adam, mini-batches, whole examples held out for validation, the weights of the best
validation epoch kept, early stopping after `patience` epochs — on the inputs and labels the library builds
(TrainData.inputs, TrainData.labels).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch
from torch import nn

from .data import TrainData
from .router import parse_features, write_mlp_router

SOFT_LABELS = ("gain", "expected", "mixed")


class MLPRouter(nn.Module):
    """sigmoid(MLP((x - mean) / std)); hidden = () is logistic regression."""

    def __init__(self, n_inputs: int, hidden: Sequence[int] = (256, 128), features="maxprob,entropy,margin,topk",
                 topk: int = 8, mean: Optional[np.ndarray] = None, std: Optional[np.ndarray] = None):
        super().__init__()
        self.features = parse_features(features)
        self.topk = topk if self.features & 8 else 0
        sizes = [n_inputs] + list(hidden) + [1]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.register_buffer("mean", torch.as_tensor(mean if mean is not None else np.zeros(n_inputs),
                                                     dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(std if std is not None else np.ones(n_inputs),
                                                    dtype=torch.float32))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        h = (x - self.mean) / self.std
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i + 1 < len(self.layers):
                h = torch.relu(h)
        return h.squeeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scores in [0, 1] (route when < tau)."""
        return torch.sigmoid(self.logits(x))

    def folded_layers(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Weights and biases with the standardization folded into the first layer (as float32, [out][in])."""
        ws = [l.weight.detach().double().cpu().numpy() for l in self.layers]
        bs = [l.bias.detach().double().cpu().numpy() for l in self.layers]
        mean, std = self.mean.double().cpu().numpy(), self.std.double().cpu().numpy()
        ws[0] = ws[0] / std[None, :]
        bs[0] = bs[0] - ws[0] @ mean
        return [w.astype(np.float32) for w in ws], [b.astype(np.float32) for b in bs]


def export(model: MLPRouter, path, *, n_embd: int, n_vocab: int, slm_name: str = "", tau: float = 0.5) -> None:
    """Writes the router file: the SLM's n_embd and n_vocab (checked when a generation loads it with the SLM)."""
    ws, bs = model.folded_layers()
    write_mlp_router(path, ws, bs, features=model.features, topk=model.topk, tau=tau, slm_name=slm_name,
                     slm_n_embd=n_embd, slm_n_vocab=n_vocab)


def _validation_mask(groups: np.ndarray, val_fraction: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    uniq = np.unique(groups)
    held = rng.random(len(uniq)) < val_fraction
    return np.isin(groups, uniq[held])


def train(data: TrainData, *, features="maxprob,entropy,margin,topk", topk: int = 8, hidden: Sequence[int] = (256, 128),
          labels: str = "expected", epochs: int = 30, patience: int = 4, batch: int = 256, lr: float = 1e-3,
          weight_decay: float = 0.0, val_fraction: float = 0.1, class_weights: bool = True, seed: int = 1,
          slm=None, verbose: bool = False) -> MLPRouter:
    """Trains an MLPRouter on collected data (see the module's description). slm: the SLM model, needed only for
    the token_embedding feature."""
    torch.manual_seed(seed)
    bits = parse_features(features)
    x_all = data.inputs(bits, topk, slm=slm)
    y_all = data.labels(labels)
    keep = y_all >= 0
    groups = np.array([data.position(i)["group"] for i in range(len(data))], np.int64)[keep]
    x, y = x_all[keep], y_all[keep]
    val = _validation_mask(groups, val_fraction, seed) if val_fraction > 0 else np.zeros(len(y), bool)
    xt, yt, xv, yv = x[~val], y[~val], x[val], y[val]
    soft = labels in SOFT_LABELS
    n1 = float((yt >= 0.5).sum())
    n0 = len(yt) - n1
    w1, w0 = (len(yt) / (2 * n1), len(yt) / (2 * n0)) if class_weights and not soft else (1.0, 1.0)
    mean = xt.astype(np.float64).mean(0)
    std = xt.astype(np.float64).std(0)
    std[std <= 1e-6] = 1.0
    model = MLPRouter(x.shape[1], [h for h in hidden if h > 0], bits, topk, mean, std)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)
    Xt, Yt = torch.from_numpy(np.ascontiguousarray(xt)), torch.from_numpy(yt)
    Xv, Yv = torch.from_numpy(np.ascontiguousarray(xv)), torch.from_numpy(yv)

    def weighted_bce(logit, target):
        w = torch.where(target > 0.5, torch.tensor(w1), torch.tensor(w0))
        return (nn.functional.binary_cross_entropy_with_logits(logit, target, reduction="none") * w).mean()

    best, best_loss, since = None, float("inf"), 0
    gen = torch.Generator().manual_seed(seed)
    for epoch in range(1, epochs + 1):
        model.train()
        order = torch.randperm(len(Yt), generator=gen)
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            opt.zero_grad()
            loss = weighted_bce(model.logits(Xt[idx]), Yt[idx])
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            val_loss = weighted_bce(model.logits(Xv), Yv).item() if len(Yv) else loss.item()
        if verbose:
            print(f"epoch {epoch}: val loss {val_loss:.5f}")
        if val_loss < best_loss:
            best_loss, since = val_loss, 0
            best = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            since += 1
            if since >= patience:
                break
    if best is not None:
        model.load_state_dict(best)
    model.eval()
    return model
