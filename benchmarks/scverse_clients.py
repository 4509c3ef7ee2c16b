"""scverse's clients on an SCTrilemma model at a real data set's size (Kang 2018 control PBMCs, 8,684 cells).

Trains SCTrilemma (small preset) and scVI (no covariate) for the same wall-clock budget, computes a log1p-CP10K PCA,
then runs what a scanpy / scvi-tools user runs next, and records that each works and what it gives:

- scanpy: ``sc.pp.neighbors(use_rep="X_sctrilemma")`` (pynndescent above 4,096 cells), ``sc.tl.umap``,
  ``sc.tl.leiden`` and the ARI of the Leiden clusters against the cell types;
- scib-metrics' ``Benchmarker`` with the three embeddings side by side;
- ``scvi.criticism.PosteriorPredictiveCheck`` with both models (cell-wise and gene-wise CV, zero fraction);
- ``sc.tl.rank_genes_groups`` on log1p of ``get_normalized_expression(library_size=1e4)``, top markers per type.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/scverse_clients.py [--budget-s 120] [--data PATH] [--out DIR]``.
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
import pandas as pd
import scanpy as sc
import scvi
import torch
from sklearn.metrics import adjusted_rand_score

from sctrilemma import SCTrilemma
from sctrilemma.benchmark import pca_baseline

LABEL_KEY, DONOR_KEY = "cell_type", "donor"
OUTPUT = Path(__file__).resolve().parent / "output"  # raw output, git-ignored
LEIDEN_RESOLUTIONS = (1.0, 0.5, 0.2)


def train_models(adata: ad.AnnData, budget_s: float, seed: int) -> tuple[SCTrilemma, scvi.model.SCVI, dict]:
    """SCTrilemma (small) and scVI (no covariate), each given ``max_time=budget_s`` as a user would."""
    seconds = {}
    scvi.settings.seed = seed
    SCTrilemma.setup_anndata(adata, donor_key=DONOR_KEY)
    ours = SCTrilemma(adata, preset="small")
    start = time.perf_counter()
    ours.train(max_epochs=10_000, max_time=timedelta(seconds=budget_s), enable_progress_bar=False)
    seconds["sctrilemma_train_s"] = time.perf_counter() - start

    scvi.settings.seed = seed
    scvi_adata = adata.copy()
    scvi.model.SCVI.setup_anndata(scvi_adata)
    theirs = scvi.model.SCVI(scvi_adata)
    start = time.perf_counter()
    theirs.train(max_epochs=10_000, max_time=timedelta(seconds=budget_s), enable_progress_bar=False)
    seconds["scvi_train_s"] = time.perf_counter() - start
    return ours, theirs, seconds


def scanpy_workflow(adata: ad.AnnData) -> dict:
    """Neighbours, UMAP and Leiden on ``X_sctrilemma``; the ARI of Leiden against the cell types."""
    result: dict = {}
    start = time.perf_counter()
    sc.pp.neighbors(adata, use_rep="X_sctrilemma", random_state=0)
    result["neighbors_s"] = time.perf_counter() - start
    start = time.perf_counter()
    sc.tl.umap(adata, random_state=0)
    result["umap_s"] = time.perf_counter() - start
    for resolution in LEIDEN_RESOLUTIONS:
        key = f"leiden_{resolution}"
        sc.tl.leiden(
            adata, resolution=resolution, flavor="igraph", n_iterations=2, directed=False, random_state=0, key_added=key
        )
        result[key] = {
            "n_clusters": int(adata.obs[key].nunique()),
            "ari": float(adjusted_rand_score(adata.obs[LABEL_KEY], adata.obs[key])),
        }
    return result


def scib_benchmarker(adata: ad.AnnData, keys: list[str]) -> pd.DataFrame:
    """scib-metrics' ``Benchmarker`` on the embeddings in ``keys`` (PCA as the pre-integration embedding)."""
    from scib_metrics.benchmark import Benchmarker

    bench = Benchmarker(
        adata,
        batch_key=DONOR_KEY,
        label_key=LABEL_KEY,
        embedding_obsm_keys=keys,
        pre_integrated_embedding_obsm_key="X_pca",
        n_jobs=1,
        progress_bar=False,
    )
    bench.benchmark()
    return bench.get_results(min_max_scale=False)


def posterior_predictive_check(ours: SCTrilemma, theirs: scvi.model.SCVI, n_cells: int, seed: int) -> dict:
    """scvi-tools' ``PosteriorPredictiveCheck`` for both models on the same ``n_cells`` cells."""
    from scvi.criticism import PosteriorPredictiveCheck

    indices = np.sort(np.random.default_rng(seed).choice(ours.adata.n_obs, n_cells, replace=False))
    summary = {}
    for name, model in (("sctrilemma", ours), ("scvi", theirs)):
        ppc = PosteriorPredictiveCheck(model.adata, {name: model}, n_samples=5, indices=indices)
        ppc.coefficient_of_variation("features")
        ppc.coefficient_of_variation("cells")
        ppc.zero_fraction()
        for metric, frame in ppc.metrics.items():
            raw = frame["Raw"].to_numpy()
            sampled = frame[name].to_numpy()
            finite = np.isfinite(raw) & np.isfinite(sampled)
            summary.setdefault(metric, {})[name] = {
                "pearson_to_raw": float(np.corrcoef(raw[finite], sampled[finite])[0, 1]),
                "mean_abs_error": float(np.mean(np.abs(raw[finite] - sampled[finite]))),
            }
    return summary


def marker_genes(model: SCTrilemma, adata: ad.AnnData, n_top: int = 5) -> dict:
    """Wilcoxon ranking of each cell type on the model's normalised expression, top genes by symbol."""
    start = time.perf_counter()
    normalised = model.get_normalized_expression(library_size=1e4, return_numpy=True)
    seconds = time.perf_counter() - start
    expression = ad.AnnData(np.log1p(normalised), obs=adata.obs[[LABEL_KEY]].copy(), var=adata.var.copy())
    sc.tl.rank_genes_groups(expression, LABEL_KEY, method="wilcoxon")
    symbols = adata.var["gene_symbol"] if "gene_symbol" in adata.var else pd.Series(adata.var_names, adata.var_names)
    markers = {}
    for group in expression.obs[LABEL_KEY].cat.categories:
        names = sc.get.rank_genes_groups_df(expression, group)["names"].head(n_top)
        markers[group] = [str(symbols[name]) for name in names]
    return {"get_normalized_expression_s": seconds, "top_markers": markers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/kang2018_pbmc_ctrl.h5ad"))
    parser.add_argument("--budget-s", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ppc-cells", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=OUTPUT / "scverse_clients")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    adata = ad.read_h5ad(args.data)
    adata.obs[DONOR_KEY] = adata.obs[DONOR_KEY].astype(str)
    ours, theirs, results = train_models(adata, args.budget_s, args.seed)
    results.update(n_cells=adata.n_obs, n_genes=adata.n_vars, torch_threads=torch.get_num_threads())
    adata.obsm["X_sctrilemma"] = ours.get_latent_representation()
    adata.obsm["X_scvi"] = theirs.get_latent_representation()
    adata.obsm["X_pca"] = pca_baseline(adata, seed=args.seed).embedding

    results["scanpy"] = scanpy_workflow(adata)
    table = scib_benchmarker(adata, ["X_sctrilemma", "X_scvi", "X_pca"])
    results["scib_benchmarker"] = table.astype(str).to_dict()
    results["posterior_predictive_check"] = posterior_predictive_check(ours, theirs, args.ppc_cells, args.seed)
    results["rank_genes_groups"] = marker_genes(ours, adata)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    table.to_csv(args.out / "scib_benchmarker.csv")
    sc.pl.umap(adata, color=[LABEL_KEY, DONOR_KEY], wspace=0.5, show=False)
    import matplotlib.pyplot as plt

    plt.savefig(args.out / "umap.png", dpi=100, bbox_inches="tight")
    print(json.dumps({k: v for k, v in results.items() if k != "scib_benchmarker"}, indent=2))
    print(table.to_string())


if __name__ == "__main__":
    main()
