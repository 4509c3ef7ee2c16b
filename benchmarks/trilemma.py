"""The trilemma scorecard on the shared real datasets: SCTrilemma (small) vs scVI vs PCA at an equal CPU budget.

For each dataset in ``--data-dir`` (default ``../shared/data``) and each seed, trains SCTrilemma (``preset="small"``)
and scVI without a batch covariate (and, with ``--scvi-donor``, with the donor as batch), each given the same
wall-clock budget the way a user gives one (``max_time``), computes a log1p-CP10K PCA, and scores all embeddings
(and the models' reconstructions) with :class:`sctrilemma.benchmark.Scorecard`; with ``--interventions`` also
SCTrilemma's demand-targeted interventions (centroid shrinkage, donor centering at alpha 0.5 and 1). Writes one
scorecard per dataset and seed, and ``summary.md`` with the mean ± SD over seeds of the headline metrics.

Usage: ``python benchmarks/trilemma.py [--budget-s 240] [--seeds 0 1 2] [--n-repeats 5] [--quick] [--out DIR]
[--json PATH] [--datasets FILE ...]``; any other data set drops in with ``--h5ad PATH --label-key KEY --context-key
KEY [--symbol-key KEY] [--context-role donor|dataset]``. SCTrilemma is given the context as its donors or, where the
context names separate experiments or studies (``CONTEXT_ROLES``), as its datasets.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import anndata as ad
import numpy as np
import pandas as pd
import scvi
import torch

from sctrilemma import SCTrilemma
from sctrilemma.benchmark import Scorecard, intervention_outputs, pca_baseline, scvi_baseline

if TYPE_CHECKING:
    from collections.abc import Sequence

OUTPUT = Path(__file__).resolve().parent / "output"  # raw output, git-ignored
DATASETS = {
    # file: (label key, context key, gene-symbol column); CellBench has no donor column (each cell line is its
    # own patient), so its context is the batch (5 plates, 2 technologies).
    "kang2018_pbmc_ctrl.h5ad": ("cell_type", "donor", "gene_symbol"),
    "cellbench_lung_celllines.h5ad": ("cell_type", "batch", None),
    "baron2016_pancreas_subset_cider.h5ad": ("cell_type", "species", None),
    "zilionis2019_mouse_lung_cluey.h5ad": ("cell_type", "Animal", None),
}
# How SCTrilemma is told the context: its donors (``donor_key``, the default) or its datasets (``dataset_key``).
# CellBench's batches are five runs of separate libraries (three plates of a five-line CEL-seq2 mixture, a three-line
# CEL-seq2 and a three-line Drop-seq mixture) and Baron's species are its separate human and mouse data sets; Kang's
# and Zilionis's contexts are the donors (mice) of one study.
CONTEXT_ROLES = {"cellbench_lung_celllines.h5ad": "dataset", "baron2016_pancreas_subset_cider.h5ad": "dataset"}


def default_context_role(file_name: str) -> str:
    """How SCTrilemma is given the context of the data set in ``file_name``: ``"dataset"`` or ``"donor"``."""
    return CONTEXT_ROLES.get(file_name, "donor")


GENE_SETS = "msigdb_hallmark_v7.0.symbols.gmt"


def train_sctrilemma(
    adata: ad.AnnData,
    context_key: str,
    budget_s: float,
    seed: int,
    model_kwargs: dict | None = None,
    plan_kwargs: dict | None = None,
    context_role: str = "donor",
    train_kwargs: dict | None = None,
) -> tuple[SCTrilemma, dict]:
    """SCTrilemma (small, with the given overrides) trained for ``budget_s`` seconds as a user would: ``max_time``.

    ``context_role`` (``"donor"`` or ``"dataset"``) says which of ``setup_anndata``'s keys the context is given as.
    """
    scvi.settings.seed = seed
    SCTrilemma.setup_anndata(adata, **{f"{context_role}_key": context_key})
    model = SCTrilemma(adata, preset="small", **(model_kwargs or {}))
    start = time.perf_counter()
    model.train(
        max_epochs=10_000,
        max_time=timedelta(seconds=budget_s),
        enable_progress_bar=False,
        plan_kwargs=plan_kwargs,
        **(train_kwargs or {}),
    )
    train_s = time.perf_counter() - start
    return model, {"train_s": train_s, "steps": int(model.trainer.global_step)}


def run_dataset(
    path: Path,
    budget_s: float,
    n_repeats: int,
    gene_sets: Path | None,
    seed: int,
    out: Path,
    interventions: bool,
    scvi_donor: bool,
    model_kwargs: dict | None = None,
    plan_kwargs: dict | None = None,
    keys: tuple[str, str, str | None] | None = None,
    context_role: str | None = None,
    train_kwargs: dict | None = None,
) -> dict:
    label_key, context_key, symbol_key = keys or DATASETS[path.name]
    context_role = context_role or default_context_role(path.name)
    # Every model trains on the threads the process started with: scanpy's preprocessing (in the PCA baseline of
    # the previous seed) raises PyTorch's thread count, which oversubscribed later seeds' training.
    torch.set_num_threads(TRAINING_THREADS)
    adata = ad.read_h5ad(path)
    adata.obs_names_make_unique()
    adata.obs[context_key] = adata.obs[context_key].astype(str)
    budgets: dict[str, dict] = {}

    model, budgets["X_sctrilemma"] = train_sctrilemma(
        adata.copy(), context_key, budget_s, seed, model_kwargs, plan_kwargs, context_role, train_kwargs
    )
    adata.obsm["X_sctrilemma"] = model.get_latent_representation()
    adata.layers["rec_sctrilemma"] = model.get_normalized_expression(
        gene_list=list(adata.var_names), library_size="observed", return_numpy=True
    )
    reconstruction_keys = {"X_sctrilemma": "rec_sctrilemma"}
    if interventions:
        for name, (embedding, reconstruction) in intervention_outputs(model, model.adata, context_key).items():
            adata.obsm[f"X_sct_{name}"], adata.layers[f"rec_sct_{name}"] = embedding, reconstruction
            reconstruction_keys[f"X_sct_{name}"] = f"rec_sct_{name}"
    scvi_runs = (("X_scvi", None), ("X_scvi_donor", context_key)) if scvi_donor else (("X_scvi", None),)
    for key, batch_key in scvi_runs:
        torch.set_num_threads(TRAINING_THREADS)
        result = scvi_baseline(adata, batch_key=batch_key, time_budget_s=budget_s, seed=seed)
        adata.obsm[key], adata.layers[f"rec_{key[2:]}"] = result.embedding, result.reconstruction
        budgets[key] = {"train_s": result.train_seconds, "epochs": result.details["epochs"]}
        reconstruction_keys[key] = f"rec_{key[2:]}"
    pca = pca_baseline(adata, seed=seed)
    adata.obsm["X_pca"] = pca.embedding
    budgets["X_pca"] = {"train_s": pca.train_seconds}

    library = {"hallmark": str(gene_sets)} if gene_sets is not None and symbol_key is not None else {}
    card = Scorecard(
        adata,
        ["X_sctrilemma", *[key for key, _ in scvi_runs], "X_pca"]
        + [k for k in reconstruction_keys if k.startswith("X_sct_")],
        label_key,
        context_key,
        reconstruction_keys=reconstruction_keys,
        gene_sets=library,
        symbol_key=symbol_key,
        n_repeats=n_repeats,
        seed=seed,
        progress_bar=False,
    )
    card.benchmark()
    target = out / path.stem / f"seed{seed}"
    target.mkdir(parents=True, exist_ok=True)
    card.get_results().to_csv(target / "scorecard.csv", index=False)
    budget_lines = [
        f"- {k}: " + ", ".join(f"{n} {v:.0f}" if isinstance(v, float) else f"{n} {v}" for n, v in b.items())
        for k, b in budgets.items()
    ]
    markdown = (
        f"## {path.name} (labels: {label_key}, context: {context_key}, budget {budget_s:.0f} s, seed {seed}, "
        f"load {os.getloadavg()[0]:.1f})\n\n"
    )
    markdown += card.to_markdown() + "\n\nTraining:\n" + "\n".join(budget_lines) + "\n"
    (target / "scorecard.md").write_text(markdown)
    card.plot_results(target / "scorecard.png")
    print(markdown, flush=True)
    return {"budgets": budgets, "results": card.get_results().to_dict(orient="records")}


TRAINING_THREADS = torch.get_num_threads()
HEADLINE = ("nmi", "ari", "bras", "depth_r2", "logfc_spearman", "deg_jaccard")


def summarize(runs: Sequence[dict], budget_s: float, overrides: dict | None = None) -> str:
    """Mean ± SD over seeds of the headline metrics, one table per dataset.

    Each seed's value is its scorecard's mean over stratified samples.
    """
    lines = [f"# Trilemma benchmark: mean ± SD over seeds (budget {budget_s:.0f} s per model)\n"]
    if overrides:
        lines.append(f"SCTrilemma: the small preset with {json.dumps(overrides)}.\n")
    rows = pd.DataFrame([{**r, "dataset": run["dataset"], "seed": run["seed"]} for run in runs for r in run["results"]])
    for dataset, table in rows.groupby("dataset", sort=False):
        table = table[table["metric"].isin(HEADLINE)]
        stats = table.groupby(["metric", "method"])["mean"].agg(["mean", "std", "count"])
        methods = list(dict.fromkeys(table["method"]))
        lines += [f"## {dataset}\n", "| metric | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
        for metric in HEADLINE:
            cells = []
            for method in methods:
                if (metric, method) not in stats.index:
                    cells.append("–")
                    continue
                row = stats.loc[(metric, method)]
                sd = 0.0 if np.isnan(row["std"]) else row["std"]
                cells.append(f"{row['mean']:.3f} ± {sd:.3f}")
            lines.append(f"| {metric} | " + " | ".join(cells) + " |")
        budgets = [run["budgets"] for run in runs if run["dataset"] == dataset]
        for key in budgets[0]:
            parts = {name: np.mean([b[key][name] for b in budgets]) for name in budgets[0][key]}
            lines.append(f"- {key}: " + ", ".join(f"{name} {value:.0f}" for name, value in parts.items()))
        lines.append("")
    lines.append("depth_r2: lower is better; – : not applicable. SD over seeds (n = number of seeds).")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--gene-sets-dir", default="../shared/genesets")
    parser.add_argument("--budget-s", type=float, default=240.0, help="training seconds per model")
    parser.add_argument("--n-repeats", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="budget 20 s, 2 repeats, Kang only, one seed")
    parser.add_argument("--interventions", action="store_true", help="also score the demand-targeted interventions")
    parser.add_argument("--scvi-donor", action="store_true", help="also train scVI with the donor as batch")
    parser.add_argument(
        "--datasets", nargs="*", default=None, help=f"file names to run (default: all of {list(DATASETS)})"
    )
    parser.add_argument("--h5ad", default=None, help="any .h5ad of raw counts, instead of --datasets")
    parser.add_argument("--label-key", default=None, help="with --h5ad: the obs column of cell identities")
    parser.add_argument("--context-key", default=None, help="with --h5ad: the obs column of donors or batches")
    parser.add_argument("--symbol-key", default=None, help="with --h5ad: the var column of gene symbols, if any")
    parser.add_argument(
        "--context-role", choices=("donor", "dataset"), default=None,
        help="give SCTrilemma the context as its donor_key or dataset_key (default: CONTEXT_ROLES, else donor)",
    )  # fmt: skip
    parser.add_argument("--model", default="{}", help="SCTrilemma keyword arguments over the small preset, as JSON")
    parser.add_argument("--plan", default="{}", help="SCTrilemma plan_kwargs over the small preset's, as JSON")
    parser.add_argument(
        "--train",
        default="{}",
        help="SCTrilemma train() keyword arguments, as JSON, e.g. '{\"early_stopping\": false}'",
    )
    parser.add_argument("--out", default=str(OUTPUT / "trilemma"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    data_dir = Path(args.data_dir)
    if args.h5ad is None and not data_dir.is_dir():
        raise SystemExit(f"{data_dir} not found: this benchmark reads the shared real datasets.")
    budget, repeats = (20.0, 2) if args.quick else (args.budget_s, args.n_repeats)
    seeds = args.seeds[:1] if args.quick else args.seeds
    files = ["kang2018_pbmc_ctrl.h5ad"] if args.quick else (args.datasets or list(DATASETS))
    keys = None
    if args.h5ad is not None:
        if args.label_key is None or args.context_key is None:
            raise SystemExit("--h5ad needs --label-key and --context-key.")
        data_dir, files = Path(args.h5ad).parent, [Path(args.h5ad).name]
        keys = (args.label_key, args.context_key, args.symbol_key)
    unknown = set(files) - set(DATASETS) if keys is None else set()
    if unknown:
        raise SystemExit(f"Unknown datasets {sorted(unknown)}; choose from {list(DATASETS)} or pass --h5ad.")
    gene_sets = Path(args.gene_sets_dir) / GENE_SETS
    model_kwargs, plan_kwargs, train_kwargs = json.loads(args.model), json.loads(args.plan), json.loads(args.train)
    given = (("model", model_kwargs), ("plan", plan_kwargs), ("train", train_kwargs))
    overrides = {key: value for key, value in given if value}
    runs = []
    for name in files:
        for seed in seeds:
            result = run_dataset(
                data_dir / name,
                budget,
                repeats,
                gene_sets if gene_sets.exists() else None,
                seed,
                Path(args.out),
                interventions=args.interventions and not args.quick,
                scvi_donor=args.scvi_donor,
                model_kwargs=model_kwargs,
                plan_kwargs=plan_kwargs,
                keys=keys,
                context_role=args.context_role,
                train_kwargs=train_kwargs,
            )
            runs.append({"dataset": name, "seed": seed, **result})
            summary = summarize(runs, budget, overrides)
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "summary.md").write_text(summary)
            if args.json:
                Path(args.json).write_text(json.dumps(runs, indent=2, default=float))
    print(summary, flush=True)


if __name__ == "__main__":
    main()
