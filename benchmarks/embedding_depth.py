"""The common-depth embedding, measured paired: the same trained model embedded at several depths and unthinned.

Each data set and seed trains one SCTrilemma (small preset) as ``trilemma.py`` does (``max_time``, the context given
as its donors or datasets by ``CONTEXT_ROLES``), then embeds every cell unthinned (``embedding_depth`` 0) and thinned
to each ``--quantiles`` of the data's depths (:func:`~sctrilemma.module.thin_to_depth`, as the small preset embeds at
its 0.1), and scores all embeddings with the same scorecard samples. Prints each variant's mean ± SD over seeds of its
difference to the unthinned embedding.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/embedding_depth.py --datasets kang2018_pbmc_ctrl.h5ad --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

import anndata as ad
import numpy as np
import pandas as pd
import torch
from trilemma import DATASETS, TRAINING_THREADS, default_context_role, train_sctrilemma

from sctrilemma.benchmark import Scorecard

if TYPE_CHECKING:
    from sctrilemma import SCTrilemma

METRICS = ("nmi", "ari", "bras", "depth_r2", "asw_label")


def trained(path: Path, seed: int, budget_s: float) -> tuple[ad.AnnData, SCTrilemma, int]:
    """One data set read as ``trilemma.py`` reads it, and an SCTrilemma trained on a copy: ``(adata, model, steps)``."""
    _, context_key, _ = DATASETS[path.name]
    torch.set_num_threads(TRAINING_THREADS)  # scoring the previous seed may have raised PyTorch's thread count
    adata = ad.read_h5ad(path)
    adata.obs_names_make_unique()
    adata.obs[context_key] = adata.obs[context_key].astype(str)
    model, budget = train_sctrilemma(
        adata.copy(), context_key, budget_s, seed, context_role=default_context_role(path.name)
    )
    return adata, model, budget["steps"]


def scored_rows(
    adata: ad.AnnData, variants: list[str], path: Path, seed: int, steps: int, n_repeats: int
) -> list[dict]:
    """The ``METRICS`` of each embedding ``adata.obsm[variant]``, all scored on the same scorecard samples."""
    label_key, context_key, _ = DATASETS[path.name]
    card = Scorecard(adata, variants, label_key, context_key, n_repeats=n_repeats, seed=seed, progress_bar=False)
    card.benchmark()
    results = card.get_results()
    results = results[results["metric"].isin(METRICS)]
    return [
        {"dataset": path.name, "seed": seed, "steps": steps, "variant": row.method, "metric": row.metric,
         "value": float(row.mean)}
        for row in results.itertuples()
    ]  # fmt: skip


def run(path: Path, seed: int, budget_s: float, quantiles: list[float], n_repeats: int) -> list[dict]:
    """Scores of the unthinned embedding and of each quantile's, for one data set and seed."""
    adata, model, steps = trained(path, seed, budget_s)
    depths = np.asarray(adata.X.sum(1)).ravel()
    variants = {"unthinned": 0.0, **{f"q{q}": float(np.quantile(depths, q)) for q in quantiles}}
    for name, depth in variants.items():
        model.module.embedding_depth.fill_(depth)
        adata.obsm[name] = model.get_latent_representation()
    return scored_rows(adata, list(variants), path, seed, steps, n_repeats)


def paired_table(rows: list[dict], baseline: str = "unthinned") -> str:
    """Each variant's mean ± SD over seeds of its difference to ``baseline``, per data set and metric."""
    scores = pd.DataFrame(rows).pivot_table(index=["dataset", "seed", "metric"], columns="variant", values="value")
    lines = []
    for variant in (v for v in scores.columns if v != baseline):
        difference = (scores[variant] - scores[baseline]).groupby(["dataset", "metric"]).agg(["mean", "std"])
        table = difference.apply(lambda r: f"{r['mean']:+.3f} ± {r['std']:.3f}", axis=1).unstack("metric")
        lines.append(f"### {variant} minus {baseline}\n\n{table.to_markdown()}\n")
    base = scores[baseline].groupby(["dataset", "metric"]).mean().unstack("metric")
    lines.append(f"### {baseline} (mean over seeds)\n\n{base.round(3).to_markdown()}\n")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--quantiles", type=float, nargs="+", default=[0.1, 0.25, 0.5])
    parser.add_argument("--n-repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="budget 20 s, 2 repeats, Baron only, one seed")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.quick:
        args.datasets, args.seeds, args.budget_s, args.n_repeats = (
            ["baron2016_pancreas_subset_cider.h5ad"], args.seeds[:1], 20.0, 2
        )  # fmt: skip
    rows = [
        row
        for name in args.datasets
        for seed in args.seeds
        for row in run(Path(args.data_dir) / name, seed, args.budget_s, args.quantiles, args.n_repeats)
    ]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(paired_table(rows))


if __name__ == "__main__":
    main()
