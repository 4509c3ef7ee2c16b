"""Learning curves: identity, invariance and fidelity of an embedding against training time, SCTrilemma beside scVI.

One process trains one model once, with a wall-clock budget of ``--budget-multiple`` times ``--budget-s`` given as
``max_time`` (as a user would; SCTrilemma's schedule anneals over that budget, and its early stopping may end a run on
a small data set before the budget; ``--no-early-stopping`` trains to the end), and scores a fixed sample of cells
at checkpoints: k-means NMI and ARI, BRAS over the context, depth R² (lower is better) and the reconstruction's
logFC Spearman and top-100 DEG Jaccard, each cell type against the rest. The clock is stopped while a checkpoint is
scored, so the budget counts training only. Checkpoints are wall-clock seconds (``--checkpoints``, as multiples of
the budget), so that two models run side by side are scored at the same training times; ``--steps`` scores at
global steps instead and trains to the last of them (for load-independent comparisons of settings), or, with
``--train-to-budget``, scores at those steps as well while training under the ``max_time`` budget. Scoring does not
touch the training's random stream, so a scored run trains as an unscored one would. For SCTrilemma the PCA of all
``K`` token means is scored too (``tok_`` columns), a diagnostic of the mean pooling.
With ``--no-early-stopping`` SCTrilemma still validates every epoch, as a run with the preset's stop does, and the
curve records the validation loss and the step at which the preset's stop would have ended the run
(``replayed_stop``): the curve beyond it shows what the stop spared or cost.
Where the model keeps an average of its weights (the small preset), a checkpoint scores the average, which is what
a run ending there would keep.
``--train-cells N`` trains on N cells that hold the scored ones, to tell whether a change with length follows the
steps or the passes over the data.

Writes the curve as JSON; ``--report A.json B.json ...`` draws the table (``.md``) and figure (``.png``) of
several runs beside ``--out``.

Usage::

    python benchmarks/learning_curve.py --data kang2018_pbmc_ctrl --method sctrilemma --json sct.json &
    python benchmarks/learning_curve.py --data kang2018_pbmc_ctrl --method scvi --json scvi.json
    python benchmarks/learning_curve.py --report sct.json scvi.json --out curve.md
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
from lightning.pytorch.callbacks import Callback, Timer, WeightAveraging
from sklearn.decomposition import PCA
from trilemma import DATASETS, default_context_role

from sctrilemma import SCTrilemma, metrics
from sctrilemma.benchmark import pca_baseline
from sctrilemma.model import PRESETS

# data set: (label key, context key), the same data sets and keys as the trilemma benchmark, which also says how
# SCTrilemma is given the context (default_context_role)
OUTPUT = Path(__file__).resolve().parent / "output"  # raw output, git-ignored
KEYS = {Path(name).stem: (label, context) for name, (label, context, _) in DATASETS.items()}
METRICS = ("nmi", "ari", "bras", "depth_r2", "logfc_spearman", "deg_jaccard", "rec_val")
CHECKPOINTS = (0.125, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0)
TRAINING_THREADS = torch.get_num_threads()


def score(embedding: np.ndarray, reconstruction: np.ndarray | None, sample: ad.AnnData, keys: tuple[str, str]) -> dict:
    """The headline metrics of one embedding (and reconstruction) of ``sample``'s cells."""
    labels, contexts = (sample.obs[key].astype(str).to_numpy() for key in keys)
    result = metrics.nmi_ari_kmeans(embedding, labels, n_init=5)
    result["bras"] = metrics.bras(embedding, labels, contexts)
    result["depth_r2"] = metrics.depth_r2(embedding, np.asarray(sample.X.sum(1)).ravel())
    if reconstruction is not None:
        contrasts = [
            metrics.differential_expression_concordance(sample.X, reconstruction, labels, group)
            for group in np.unique(labels)
        ]
        result["logfc_spearman"] = float(np.nanmean([c["logfc_spearman"] for c in contrasts]))
        result["deg_jaccard"] = float(np.nanmean([c["deg_jaccard"] for c in contrasts]))
    return {name: round(float(value), 4) for name, value in result.items()}


class Checkpoints(Callback):
    """Score ``model`` on ``sample`` at training seconds or global steps, with the ``max_time`` clock stopped."""

    def __init__(self, model, sample: ad.AnnData, cells: np.ndarray, keys, seconds=(), steps=()) -> None:
        self.model, self.sample, self.cells, self.keys = model, sample, cells, keys
        self.seconds, self.steps, self.rows = sorted(seconds), set(steps), []
        self.start, self.paused = time.perf_counter(), 0.0

    def training_seconds(self) -> float:
        return time.perf_counter() - self.start - self.paused

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        due = trainer.global_step in self.steps
        while self.seconds and self.training_seconds() >= self.seconds[0]:
            self.seconds.pop(0)
            due = True
        if due:
            self.record(trainer, pl_module)

    def record(self, trainer, pl_module) -> None:
        with torch.random.fork_rng(devices=[]):  # scoring draws (reconstruction targets) leave training's stream alone
            self._record(trainer, pl_module)

    def _record(self, trainer, pl_module) -> None:
        began = time.perf_counter()
        # Score the weights a run ending here would keep: a weight average's, swapped in as for validation.
        averages = [c for c in trainer.callbacks if isinstance(c, WeightAveraging)]
        for average in averages:
            average.on_validation_epoch_start(trainer, pl_module)
        pl_module.module.eval()
        self.model.is_trained_ = True  # scvi-tools refuses latents until fit ends; these are mid-training ones
        row = {"step": trainer.global_step, "epoch": trainer.current_epoch, "train_s": began - self.start - self.paused}
        row.update(self.evaluate())
        row.update(self.heldout_loss(trainer))
        for average in averages:
            average.on_validation_epoch_end(trainer, pl_module)
        pl_module.module.train()
        self.model.is_trained_ = False
        self.rows.append(row)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
        torch.set_num_threads(TRAINING_THREADS)  # scoring may raise PyTorch's thread count
        spent = time.perf_counter() - began
        self.paused += spent
        for callback in trainer.callbacks:  # give the scoring time back to the max_time budget
            if isinstance(callback, Timer) and callback._start_time.get("train") is not None:
                callback._start_time["train"] += spent

    def heldout_loss(self, trainer) -> dict:
        """Reconstruction loss per cell on up to 1,000 training cells and on the validation cells: overfitting shows
        as a validation loss that rises while the training loss falls."""
        splitter = trainer.datamodule
        train_cells = np.asarray(splitter.train_idx)[:1000]
        losses = {"rec_train": train_cells, "rec_val": np.asarray(splitter.val_idx)}
        return {
            name: round(float(next(iter(self.model.get_reconstruction_error(indices=cells).values()))), 2)
            for name, cells in losses.items()
            if cells.size
        }

    def evaluate(self) -> dict:
        embedding = self.model.get_latent_representation(indices=self.cells)
        if isinstance(self.model, SCTrilemma):
            reconstruction = self.model.get_normalized_expression(
                indices=self.cells, gene_list=list(self.sample.var_names), library_size="observed", return_numpy=True
            )
        else:
            library = np.asarray(self.sample.X.sum(1)).ravel()[:, None]
            reconstruction = (
                self.model.get_normalized_expression(indices=self.cells, library_size=1.0, return_numpy=True) * library
            )
        row = score(embedding, reconstruction, self.sample, self.keys)
        if isinstance(self.model, SCTrilemma):
            tokens = self.model.get_latent_tokens(indices=self.cells).reshape(self.cells.size, -1)
            tokens = PCA(50, random_state=0).fit_transform(tokens)
            row.update({f"tok_{k}": v for k, v in score(tokens, None, self.sample, self.keys).items()})
        return row


class ValidationHistory(Callback):
    """The monitored validation loss at each validation, with the global step and the training seconds.

    With ``replay_stop``, it also replays the preset's early stop (Lightning's rule: ``patience`` validations without
    a lower loss, no minimum change): ``stop`` is the validation where that stop would end the run, at which the
    model is scored as well.
    """

    def __init__(self, checkpoints: Checkpoints, replay_stop: bool = False) -> None:
        self.checkpoints, self.replay_stop, self.rows = checkpoints, replay_stop, []
        self.patience = PRESETS["small"]["train"]["early_stopping_patience"]
        self.best, self.waited, self.stop = float("inf"), 0, None

    def on_validation_end(self, trainer, pl_module) -> None:
        value = trainer.callback_metrics.get(PRESETS["small"]["train"]["early_stopping_monitor"])
        if value is None or trainer.sanity_checking:
            return
        row = {"step": trainer.global_step, "train_s": self.checkpoints.training_seconds(), "loss": float(value)}
        self.rows.append(row)
        if not self.replay_stop or self.stop is not None:
            return
        if row["loss"] < self.best:
            self.best, self.waited = row["loss"], 0
            return
        self.waited += 1
        if self.waited >= self.patience:
            self.stop = row
            self.checkpoints.record(trainer, pl_module)
            self.checkpoints.rows[-1]["replayed_stop"] = True


def train(args: argparse.Namespace) -> dict:
    keys = KEYS[args.data]
    adata = ad.read_h5ad(Path(args.data_dir) / f"{args.data}.h5ad")
    adata.obs_names_make_unique()
    adata.obs[keys[1]] = adata.obs[keys[1]].astype(str)
    rng = np.random.default_rng(args.seed)
    cells = np.sort(rng.choice(adata.n_obs, min(args.n_cells, adata.n_obs), replace=False))
    if args.train_cells is not None:  # train on a subset that holds the scored cells
        others = rng.permutation(np.setdiff1d(np.arange(adata.n_obs), cells))
        kept = np.sort(np.concatenate([cells, others[: max(0, args.train_cells - cells.size)]]))
        adata = adata[kept].copy()
        cells = np.searchsorted(kept, cells)
    sample = adata[cells].copy()
    pca = score(pca_baseline(adata, seed=args.seed).embedding[cells], None, sample, keys)
    torch.set_num_threads(TRAINING_THREADS)
    scvi.settings.seed = args.seed
    if args.method == "scvi":
        scvi.model.SCVI.setup_anndata(adata)
        model = scvi.model.SCVI(adata, gene_likelihood="zinb")
        plan_kwargs = None
    else:
        role = default_context_role(f"{args.data}.h5ad")
        SCTrilemma.setup_anndata(adata, **{f"{role}_key": keys[1]})
        model = SCTrilemma(adata, preset="small", **json.loads(args.model))
        plan_kwargs = json.loads(args.plan) or None
    total = args.budget_s * args.budget_multiple
    by_time = not args.steps or args.train_to_budget
    seconds = [args.budget_s * c for c in CHECKPOINTS if c <= args.budget_multiple] if by_time else []
    checkpoints = Checkpoints(model, sample, cells, keys, seconds=seconds, steps=args.steps or ())
    replay_stop = args.no_early_stopping and args.method == "sctrilemma"
    history = ValidationHistory(checkpoints, replay_stop=replay_stop)
    train_kwargs = {"max_time": timedelta(seconds=total)} if by_time else {"max_steps": max(args.steps)}
    if replay_stop:
        train_kwargs.update(early_stopping=False, check_val_every_n_epoch=1)  # validate as the preset's stop would
    model.train(
        max_epochs=100_000,
        enable_progress_bar=False,
        callbacks=[checkpoints, history],
        plan_kwargs=plan_kwargs,
        **train_kwargs,
    )
    if by_time and checkpoints.seconds:  # the budget ended between the last checkpoints: score the end
        checkpoints.record(model.trainer, model.trainer.lightning_module)
    return {
        "method": args.method,
        "data": args.data,
        "model": json.loads(args.model),
        "plan": json.loads(args.plan),
        "early_stopping": args.method == "sctrilemma" and not args.no_early_stopping,
        "budget_s": args.budget_s,
        "budget_multiple": args.budget_multiple,
        "seed": args.seed,
        "n_cells": int(cells.size),
        "train_cells": int(adata.n_obs),
        "threads": TRAINING_THREADS,
        "load_average_1min_at_end": os.getloadavg()[0],
        "pca": pca,
        "curve": checkpoints.rows,
        "validation": history.rows,
        "replayed_stop": history.stop,
    }


def run_name(run: dict) -> str:
    """The method, its settings over the preset, and whether SCTrilemma's early stopping was switched off."""
    name = run["method"] + (f" {json.dumps(run['model'])}" if run.get("model") else "")
    return name + (
        " (no early stopping)" if run["method"] == "sctrilemma" and run.get("early_stopping") is False else ""
    )


def report(runs: list[dict], out: Path) -> None:
    """A table (``out``) and a figure (``out`` as ``.png``) of several curves on one data set."""
    import matplotlib.pyplot as plt

    budget = runs[0]["budget_s"]
    lines = [
        f"# Learning curves on {runs[0]['data']}, seed {runs[0]['seed']}\n",
        f"Each model trained once with `max_time` = {runs[0]['budget_multiple']:g} x {budget:.0f} s (or, where "
        f"scored at steps only, to the last of them) at {runs[0]['threads']} thread(s), scored on "
        f"{runs[0]['n_cells']} fixed cells at the same training seconds or steps (clock stopped while scoring); "
        "depth_r2: lower is better. PCA of log1p-CP10K for reference.\n",
    ]
    header = "| method | training s | step | " + " | ".join(METRICS) + " |"
    lines += [header, "|---" * (len(METRICS) + 3) + "|"]
    for run in runs:
        name = run_name(run)
        for row in run["curve"]:
            values = " | ".join(f"{row[m]:.3f}" if m in row else "–" for m in METRICS)
            lines.append(f"| {name} | {row['train_s']:.0f} | {row['step']} | {values} |")
    pca = runs[0]["pca"]
    lines.append("| pca | | | " + " | ".join(f"{pca[m]:.3f}" if m in pca else "–" for m in METRICS) + " |")
    for run in runs:
        if run.get("replayed_stop"):
            stop = run["replayed_stop"]
            lines.append(
                f"\n{run_name(run)}: the preset's early stop would have ended this run at step {stop['step']} "
                f"({stop['train_s']:.0f} s); the dashed line in the figure."
            )
    out.write_text("\n".join(lines) + "\n")

    figure, axes = plt.subplots(1, len(METRICS), figsize=(3.2 * len(METRICS), 3), constrained_layout=True)
    for axis, metric in zip(axes, METRICS, strict=True):
        for run in runs:
            seconds = [row["train_s"] for row in run["curve"]]
            axis.plot(seconds, [row.get(metric, float("nan")) for row in run["curve"]], "o-", label=run_name(run))
        if metric in pca:
            axis.axhline(pca[metric], linestyle=":", color="grey", label="pca")
        axis.axvline(budget, color="red", linewidth=0.8)
        for run in runs:
            if run.get("replayed_stop"):
                axis.axvline(run["replayed_stop"]["train_s"], color="grey", linestyle="--", linewidth=0.8)
        axis.set_xscale("log")
        axis.set_xlabel("training seconds")
        axis.set_title(metric)
    axes[0].legend(fontsize=7)
    figure.savefig(out.with_suffix(".png"), dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--data", default="kang2018_pbmc_ctrl", choices=sorted(KEYS))
    parser.add_argument("--method", default="sctrilemma", choices=["sctrilemma", "scvi"])
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--budget-multiple", type=float, default=10.0)
    parser.add_argument("--steps", type=int, nargs="*", default=None, help="score at these global steps instead")
    parser.add_argument(
        "--train-to-budget", action="store_true", help="with --steps: train under the max_time budget, not to the last"
    )
    parser.add_argument("--model", default="{}", help="SCTrilemma keyword arguments over the small preset, as JSON")
    parser.add_argument("--plan", default="{}", help="SCTrilemma plan_kwargs, as JSON")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-early-stopping", action="store_true", help="train SCTrilemma to the end even if its validation loss rises"
    )
    parser.add_argument("--n-cells", type=int, default=2000, help="cells scored at each checkpoint")
    parser.add_argument(
        "--train-cells", type=int, default=None, help="train on this many cells (the scored ones and others at random)"
    )
    parser.add_argument("--json", default=None, help="the curve's file (default: output/curve_METHOD_DATA_seedS.json)")
    parser.add_argument("--report", nargs="+", default=None, help="draw these saved curves instead of training")
    parser.add_argument("--out", default=str(OUTPUT / "learning_curve.md"))
    args = parser.parse_args()
    if args.report:
        report([json.loads(Path(path).read_text()) for path in args.report], Path(args.out))
        return
    result = train(args)
    path = Path(args.json) if args.json else OUTPUT / f"curve_{args.method}_{args.data}_seed{args.seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
