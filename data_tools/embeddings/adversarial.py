"""Unsupervised adversarial mapping (MUSE, Conneau et al. 2018; TreLM's "adversarial embedding aligning",
Appendix A.1, which fixes the PrLM's embeddings and maps the word2vec ones onto them), in torch on CPU.

A discriminator learns to tell mapped target vectors W x from source vectors y; W is trained to fool it and
kept near-orthogonal by MUSE's update W <- (1 + beta) W - beta (W W^T) W after every step. After each epoch
the unsupervised criterion (mean cosine of the CSLS-induced dictionary of the most frequent rows) is measured
and the best W kept; then Procrustes refinement on mutual-CSLS dictionaries, keeping the best W by the same
criterion over the whole run. The defaults are MUSE's (unsupervised.py), except:

* ``normalize`` is "center,renorm" (MUSE's default: none): a model's input embeddings and word2vec vectors
  differ in scale and offset, which an orthogonal map cannot fix and a discriminator would exploit;
* the discriminator ends in a logit with ``BCEWithLogitsLoss`` instead of ``Sigmoid`` + ``BCELoss`` (same
  loss, numerically safer);
* CSLS neighbourhoods and dictionary candidates are restricted to the ranked rows considered (MUSE computes
  r over the whole vocabulary and then filters pairs by rank).

MUSE's schedule (5 epochs x 31,250 iterations x 6 steps with a 2048-wide discriminator) takes hours on a CPU;
scale it down with ``--epochs``, ``--iterations``, ``--dis-hidden`` and the rank limits. Deterministic: the
global torch generator (dropout, initialisation) is seeded inside ``fork_rng``, sampling uses its own
generator, and the thread count is an option, since float sums may depend on it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from data_tools.typed_options import option
from data_tools.embeddings.alignment import NORMALIZE, Space, mean_cosine_criterion, precision_at_1, refine, unit
from data_tools.errors import PrepareError


@dataclass(frozen=True)
class AdversarialOptions:
    epochs: int = option(5, "adversarial epochs (MUSE n_epochs 5)")
    iterations: int = option(31250, "mapping updates per epoch (MUSE epoch_size 1e6 / batch 32)")
    batch_size: int = option(32, "vectors drawn from each side per step (MUSE batch_size)")
    dis_steps: int = option(5, "discriminator steps per mapping step (MUSE dis_steps)")
    dis_layers: int = option(2, "discriminator hidden layers (MUSE dis_layers)")
    dis_hidden: int = option(2048, "discriminator hidden width (MUSE dis_hid_dim)")
    dis_dropout: float = option(0.0, "dropout after each hidden layer (MUSE dis_dropout)")
    dis_input_dropout: float = option(0.1, "dropout on the discriminator's input (MUSE dis_input_dropout)")
    dis_smoothing: float = option(0.1, "label smoothing: targets 1-s for mapped, s for source (MUSE dis_smooth)")
    dis_most_frequent: int = option(75000, "draw from the N most frequent rows of each side; 0: all")
    dis_lr: float = option(0.1, "discriminator SGD learning rate (MUSE dis_optimizer sgd,lr=0.1)")
    map_lr: float = option(0.1, "mapping SGD learning rate (MUSE map_optimizer sgd,lr=0.1)")
    map_beta: float = option(0.001, "orthogonalisation strength beta (MUSE map_beta)")
    lr_decay: float = option(0.98, "mapping lr factor after each epoch (MUSE lr_decay)")
    lr_shrink: float = option(0.5, "extra mapping lr factor when the criterion did not improve (MUSE lr_shrink)")
    min_lr: float = option(1e-6, "stop the adversarial epochs below this mapping lr (MUSE min_lr)")
    refinement: int = option(5, "Procrustes refinement iterations (MUSE n_refinement)")
    refine_max_rank: int = option(15000, "refinement dictionary from the N most frequent rows (MUSE dico_max_rank)")
    criterion_max_rank: int = option(10000, "criterion dictionary from the N most frequent rows (MUSE: 10000)")
    csls_k: int = option(10, "neighbours in CSLS's hubness penalty (MUSE csls_knn_10)")
    normalize: str = option("center,renorm", "fit in centred and/or unit-length coordinates", choices=NORMALIZE)
    seed: int = option(0, "seed of initialisation, dropout and sampling")
    threads: int = option(1, "torch CPU threads (results may depend on it)")

    def validate(self) -> None:
        for name in ("epochs", "iterations", "batch_size", "dis_steps", "dis_layers", "dis_hidden", "csls_k",
                     "threads", "refine_max_rank", "criterion_max_rank"):
            if getattr(self, name) < 1:
                raise PrepareError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.dis_smoothing < 0.5:
            raise PrepareError(f"--dis-smoothing must be in [0, 0.5), got {self.dis_smoothing}")


def build_discriminator(dim: int, opts: AdversarialOptions):
    """MUSE's: input dropout, then ``dis_layers`` x (Linear, LeakyReLU(0.2), Dropout), then Linear -> 1 logit."""
    from torch import nn
    layers: list = [nn.Dropout(opts.dis_input_dropout)]
    width = dim
    for _ in range(opts.dis_layers):
        layers += [nn.Linear(width, opts.dis_hidden), nn.LeakyReLU(0.2), nn.Dropout(opts.dis_dropout)]
        width = opts.dis_hidden
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


class _Adversary:
    """The mapping W, the discriminator, their optimisers and the sampling generator."""

    def __init__(self, xs: Space, ys: Space, opts: AdversarialOptions):
        import torch
        from torch import nn
        self.torch = torch
        self.opts = opts
        self.x, self.y = torch.from_numpy(xs.vectors), torch.from_numpy(ys.vectors)
        mf = opts.dis_most_frequent
        self.nx, self.ny = (min(mf, len(self.x)), min(mf, len(self.y))) if mf else (len(self.x), len(self.y))
        dim = self.x.shape[1]
        self.w = nn.Parameter(torch.eye(dim))  # MUSE map_id_init
        self.dis = build_discriminator(dim, opts)
        self.map_opt = torch.optim.SGD([self.w], lr=opts.map_lr)
        self.dis_opt = torch.optim.SGD(self.dis.parameters(), lr=opts.dis_lr)
        self.gen = torch.Generator().manual_seed(opts.seed)
        s = opts.dis_smoothing
        # [2 * batch]: mapped target rows first (label 1 - s), then source rows (label s)
        self.labels = torch.cat([torch.full((opts.batch_size,), 1 - s), torch.full((opts.batch_size,), s)])
        self.loss = nn.BCEWithLogitsLoss()

    def _batch(self, track_map: bool):
        torch, bs = self.torch, self.opts.batch_size
        xi = torch.randint(self.nx, (bs,), generator=self.gen)
        yi = torch.randint(self.ny, (bs,), generator=self.gen)
        w = self.w if track_map else self.w.detach()
        return torch.cat([self.x[xi] @ w.T, self.y[yi]])  # [2 * bs, dim]

    def dis_step(self) -> float:
        self.dis.train()
        loss = self.loss(self.dis(self._batch(False)).squeeze(1), self.labels)
        self.dis_opt.zero_grad()
        loss.backward()
        self.dis_opt.step()
        return loss.item()

    def map_step(self) -> float:
        self.dis.eval()
        loss = self.loss(self.dis(self._batch(True)).squeeze(1), 1 - self.labels)  # fool it: flipped labels
        self.map_opt.zero_grad()
        loss.backward()
        self.map_opt.step()
        with self.torch.no_grad():
            w, beta = self.w, self.opts.map_beta
            w.copy_((1 + beta) * w - beta * (w @ w.T) @ w)
        return loss.item()

    def epoch(self) -> tuple[float, float]:
        dis_losses, map_losses = [], []
        for _ in range(self.opts.iterations):
            for _ in range(self.opts.dis_steps):
                dis_losses.append(self.dis_step())
            map_losses.append(self.map_step())
        return float(np.mean(dis_losses)), float(np.mean(map_losses))

    def numpy_w(self) -> np.ndarray:
        return self.w.detach().numpy().copy()


def criterion(xs: Space, ys: Space, w: np.ndarray, opts: AdversarialOptions) -> float:
    n = opts.criterion_max_rank
    return mean_cosine_criterion(unit(xs.vectors[:n] @ w.T), unit(ys.vectors[:n]), opts.csls_k)


def fit_adversarial(xs: Space, ys: Space, opts: AdversarialOptions, gold: dict[int, set[int]] | None = None,
                    log: Callable[[str], None] = lambda _: None) -> tuple[np.ndarray, dict]:
    """Returns the chosen W [dim, dim] and the diagnostics (criterion per epoch and refinement iteration)."""
    opts.validate()
    import torch  # here, not at the top: the procrustes CLI and the option parser do without torch's 1-2 s import
    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(opts.seed)
        torch.set_num_threads(opts.threads)
        try:
            return _fit(xs, ys, opts, gold, log)
        finally:
            torch.set_num_threads(threads)


def _record(xs, ys, w, opts, gold, **fields) -> dict:
    row = {**fields, "criterion": criterion(xs, ys, w, opts)}
    if gold:
        row["precision_at_1"] = precision_at_1(xs, ys, w, gold, opts.csls_k)
    return row


def _fit(xs, ys, opts, gold, log) -> tuple[np.ndarray, dict]:
    adv = _Adversary(xs, ys, opts)
    start = _record(xs, ys, adv.numpy_w(), opts, gold, stage="identity")
    log(f"identity: criterion {start['criterion']:.4f}")
    epochs, best, best_w = [], None, adv.numpy_w()
    for epoch in range(opts.epochs):
        t0 = time.perf_counter()
        dis_loss, map_loss = adv.epoch()
        lr = adv.map_opt.param_groups[0]["lr"]
        row = _record(xs, ys, adv.numpy_w(), opts, gold, stage="adversarial", epoch=epoch, dis_loss=dis_loss,
                      map_loss=map_loss, map_lr=lr, seconds=round(time.perf_counter() - t0, 2))
        epochs.append(row)
        log(f"epoch {epoch}: criterion {row['criterion']:.4f} dis_loss {dis_loss:.4f} map_loss {map_loss:.4f} "
            f"({row['seconds']} s)")
        improved = best is None or row["criterion"] > best["criterion"]
        if improved:
            best, best_w = row, adv.numpy_w()
        # MUSE's update_lr: decay every epoch, shrink further when the criterion fell below the best so far
        lr = max(opts.min_lr, lr * opts.lr_decay) * (1.0 if improved else opts.lr_shrink)
        adv.map_opt.param_groups[0]["lr"] = lr
        if lr < opts.min_lr:
            break
    refinement, w = [], best_w
    for it in range(opts.refinement):
        t0 = time.perf_counter()
        w, size = refine(xs, ys, w, opts.refine_max_rank, opts.csls_k)
        row = _record(xs, ys, w, opts, gold, stage="refinement", iteration=it, dictionary_size=size,
                      seconds=round(time.perf_counter() - t0, 2))
        refinement.append(row)
        log(f"refinement {it}: criterion {row['criterion']:.4f} dictionary {size} ({row['seconds']} s)")
        if row["criterion"] > best["criterion"]:
            best, best_w = row, w
    chosen = {k: best[k] for k in ("stage", "epoch", "iteration", "criterion") if k in best}
    return best_w, {"identity": start, "epochs": epochs, "refinement": refinement, "chosen": chosen}
