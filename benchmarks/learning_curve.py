"""Learning curve of SCTrilemma (small preset) on Kang 2018: training steps against identity, invariance and fidelity.

One run with a wall-clock budget of ``--budget-multiple`` times ``--budget-s`` (given as ``max_time``, as a user
would), evaluated on a fixed sample of cells at a geometric series of steps: k-means NMI and ARI, BRAS, depth R²
(lower is better) and the reconstruction's logFC Spearman and top-100 DEG Jaccard, each cell type against the
rest. The clock is stopped while a checkpoint is evaluated, so the budget counts training only. scVI (no batch
covariate) trained for ``--budget-s`` and a log1p-CP10K PCA are scored on the same cells, for reference.

Writes the curve as JSON and as ``learning_curve.md`` and ``learning_curve.png`` beside it.

Usage: ``python benchmarks/learning_curve.py [--budget-s 240] [--budget-multiple 10] [--seed 0] [--json PATH]``;
``--from-json`` redraws the table and figure from a saved run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path

import anndata as ad
import numpy as np
import scvi
import torch
from lightning.pytorch.callbacks import Callback, Timer

from sctrilemma import SCTrilemma, metrics
from sctrilemma.benchmark import pca_baseline, scvi_baseline

DATA = "kang2018_pbmc_ctrl.h5ad"
LABEL_KEY, DONOR_KEY = "cell_type", "donor"


def score(embedding: np.ndarray, reconstruction: np.ndarray | None, adata: ad.AnnData) -> dict[str, float]:
    """The headline metrics of one embedding (and reconstruction) of ``adata``'s cells."""
    labels, donors = adata.obs[LABEL_KEY].to_numpy(), adata.obs[DONOR_KEY].to_numpy()
    result = metrics.nmi_ari_kmeans(embedding, labels, n_init=5)
    result["bras"] = metrics.bras(embedding, labels, donors)
    result["depth_r2"] = metrics.depth_r2(embedding, np.asarray(adata.X.sum(1)).ravel())
    if reconstruction is not None:
        contrasts = [
            metrics.differential_expression_concordance(adata.X, reconstruction, labels, group)
            for group in np.unique(labels)
        ]
        result["logfc_spearman"] = float(np.nanmean([c["logfc_spearman"] for c in contrasts]))
        result["deg_jaccard"] = float(np.nanmean([c["deg_jaccard"] for c in contrasts]))
    return {name: float(value) for name, value in result.items()}


class Checkpoints(Callback):
    """Score the model at given global steps, with the ``max_time`` clock stopped while scoring."""

    def __init__(self, model: SCTrilemma, cells: np.ndarray, steps: list[int]) -> None:
        self.model, self.cells, self.steps, self.rows = model, cells, set(steps), []
        self.start = time.perf_counter()
        self.paused = 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step not in self.steps:
            return
        began = time.perf_counter()
        pl_module.module.eval()
        self.model.is_trained_ = True  # scvi-tools refuses latents until fit ends; these are mid-training ones
        embedding = self.model.get_latent_representation(indices=self.cells)
        reconstruction = self.model.get_normalized_expression(
            indices=self.cells, gene_list=list(self.model.adata.var_names), library_size="observed", return_numpy=True
        )
        pl_module.module.train()
        self.model.is_trained_ = False
        row = {"step": step, "train_s": began - self.start - self.paused}
        row.update(score(embedding, reconstruction, self.model.adata[self.cells]))
        self.rows.append(row)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
        torch.set_num_threads(TRAINING_THREADS)  # scoring may raise PyTorch's thread count (see trilemma.py)
        spent = time.perf_counter() - began
        self.paused += spent
        for callback in trainer.callbacks:  # give the scoring time back to the max_time budget
            if isinstance(callback, Timer) and callback._start_time.get("train") is not None:
                callback._start_time["train"] += spent


TRAINING_THREADS = torch.get_num_threads()
METRICS = ("nmi", "ari", "bras", "depth_r2", "logfc_spearman", "deg_jaccard")


def report(result: dict, json_path: Path) -> None:
    """``learning_curve.md`` (a table) and ``learning_curve.png`` (one panel per metric) beside ``json_path``."""
    import matplotlib.pyplot as plt

    budget = result["budget_s"]
    header = "| step | training s | " + " | ".join(METRICS) + " |"
    lines = [
        f"# Learning curve: SCTrilemma (small) on Kang 2018, seed {result['seed']}\n",
        f"One run with `max_time` = {result['budget_multiple']:g} x {budget:.0f} s, scored on "
        f"{result.get('n_cells', 2000)} fixed cells at each step (clock stopped while scoring); "
        f"depth_r2: lower is better.\n",
        header,
        "|---" * (len(METRICS) + 2) + "|",
    ]
    for row in result["curve"]:
        values = " | ".join(f"{row.get(m, float('nan')):.3f}" for m in METRICS)
        lines.append(f"| {row['step']} | {row['train_s']:.0f} | {values} |")
    for name, ref in result["references"].items():
        trained = f" ({ref['train_s']:.0f} s)" if "train_s" in ref else ""
        values = " | ".join(f"{ref[m]:.3f}" if m in ref else "–" for m in METRICS)
        lines.append(f"| {name}{trained} | | {values} |")
    json_path.with_suffix(".md").write_text("\n".join(lines) + "\n")

    figure, axes = plt.subplots(1, len(METRICS), figsize=(3.2 * len(METRICS), 3), constrained_layout=True)
    seconds = [row["train_s"] for row in result["curve"]]
    for axis, metric in zip(axes, METRICS, strict=True):
        axis.plot(seconds, [row.get(metric, float("nan")) for row in result["curve"]], "o-", label="SCTrilemma")
        for (name, ref), style in zip(result["references"].items(), ("--", ":"), strict=False):
            if metric in ref:
                axis.axhline(ref[metric], linestyle=style, color="grey" if name == "pca" else "black", label=name)
        axis.axvline(budget, color="red", linewidth=0.8)
        axis.set_xscale("log")
        axis.set_xlabel("training seconds")
        axis.set_title(metric)
    axes[0].legend(fontsize=7)
    figure.savefig(json_path.with_suffix(".png"), dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--budget-multiple", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-cells", type=int, default=2000, help="cells scored at each checkpoint")
    parser.add_argument("--json", default="benchmarks/results/quality/learning_curve.json")
    parser.add_argument("--from-json", action="store_true", help="only redraw the table and figure from --json")
    args = parser.parse_args()
    if args.from_json:
        report(json.loads(Path(args.json).read_text()), Path(args.json))
        return
    adata = ad.read_h5ad(Path(args.data_dir) / DATA)
    adata.obs[DONOR_KEY] = adata.obs[DONOR_KEY].astype(str)
    cells = np.sort(np.random.default_rng(args.seed).choice(adata.n_obs, min(args.n_cells, adata.n_obs), replace=False))
    sample = adata[cells].copy()
    references = {"pca": score(pca_baseline(adata, seed=args.seed).embedding[cells], None, sample)}
    torch.set_num_threads(TRAINING_THREADS)
    scvi_result = scvi_baseline(adata, time_budget_s=args.budget_s, seed=args.seed)
    references["scvi"] = score(scvi_result.embedding[cells], scvi_result.reconstruction[cells], sample)
    references["scvi"]["train_s"] = scvi_result.train_seconds
    print(json.dumps(references), flush=True)

    torch.set_num_threads(TRAINING_THREADS)
    scvi.settings.seed = args.seed
    SCTrilemma.setup_anndata(adata, donor_key=DONOR_KEY)
    model = SCTrilemma(adata, preset="small")
    steps = [int(round(25 * 2 ** (k / 2))) for k in range(20)]
    checkpoints = Checkpoints(model, cells, steps)
    model.train(
        max_epochs=10_000,
        max_time=timedelta(seconds=args.budget_s * args.budget_multiple),
        enable_progress_bar=False,
        callbacks=[checkpoints],
    )
    result = {
        "budget_s": args.budget_s,
        "budget_multiple": args.budget_multiple,
        "seed": args.seed,
        "n_cells": int(cells.size),
        "final_step": int(model.trainer.global_step),
        "threads": int(os.environ.get("OMP_NUM_THREADS", 0)) or None,
        "load_average_1min_at_end": os.getloadavg()[0],
        "references": references,
        "curve": checkpoints.rows,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2))
    report(result, Path(args.json))


if __name__ == "__main__":
    main()
