"""The paper's disease-contrast check: does a zero-shot reconstruction keep a disease's expression response?

COMBAT 2022 blood: the reference is trained on its two healthy donors; the cells of its four COVID-19 donors (two
mild, two critical) are embedded zero-shot and reconstructed. Per COVID-19 donor, the logFC of each gene's mean
CP10K against the healthy donors' is computed from the observed counts and from the reconstruction (the model's
normalised expression at a library of 10,000, healthy cells by the reference, COVID-19 cells by the query model),
over the ``--genes`` most expressed genes. Scores, averaged over the four donors: Spearman ρ of reconstructed
against observed logFC, and the Jaccard index of the top-100 genes by |logFC|.

Methods, each trained on the healthy cells for ``--budget-s`` seconds: SCTrilemma (small preset, donors as
``donor_key``, the query mapped by ``load_query_data``) and scVI (scvi-tools defaults, no covariate, the query by
scArches' ``load_query_data`` without training).

Usage: ``OMP_NUM_THREADS=1 python benchmarks/disease_response.py [--seeds 0 1 2] [--budget-s 120]
[--out benchmarks/output/disease_response]``.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp
import scvi
import torch
from scipy.stats import spearmanr

from sctrilemma import SCTrilemma

DATA = Path(__file__).parents[1].parent / "shared" / "data" / "combat2022_covid_blood_6donors_scdapp.h5ad"
HEALTHY = "Healthy"
TOP_DEGS = 100
PSEUDOCOUNT = 0.01  # in CP10K


def load() -> tuple[ad.AnnData, ad.AnnData]:
    """COMBAT's healthy cells (the reference) and COVID-19 cells (the query), raw counts, ``donor`` as strings."""
    adata = ad.read_h5ad(DATA)
    adata.X = sp.csr_matrix(adata.X, dtype=np.float32)
    adata.obs["donor"] = adata.obs["donor"].astype(str)
    healthy = (adata.obs["condition"] == HEALTHY).to_numpy()
    return adata[healthy].copy(), adata[~healthy].copy()


def cp10k(adata: ad.AnnData) -> sp.csr_matrix:
    """Each cell's counts per 10,000, ``(n_cells, n_genes)``."""
    return sp.csr_matrix(sp.diags(1e4 / np.asarray(adata.X.sum(1)).ravel()) @ adata.X)


def most_expressed(adata: ad.AnnData, n_genes: int) -> pd.Index:
    """The ``n_genes`` genes of highest mean CP10K."""
    return adata.var_names[np.argsort(-np.asarray(cp10k(adata).mean(0)).ravel())[:n_genes]]


def observed_cp10k(adata: ad.AnnData, genes: pd.Index) -> np.ndarray:
    """Each cell's CP10K of ``genes``, ``(n_cells, n_genes)``."""
    return np.asarray(cp10k(adata)[:, adata.var_names.get_indexer(genes)].todense())


def logfc(disease: np.ndarray, healthy: np.ndarray) -> np.ndarray:
    """log of the mean expression ratio per gene."""
    return np.log((disease.mean(0) + PSEUDOCOUNT) / (healthy.mean(0) + PSEUDOCOUNT))


def scores(observed: dict[str, np.ndarray], reconstructed: dict[str, np.ndarray]) -> dict[str, float]:
    """Spearman ρ and top-DEG Jaccard of reconstructed against observed logFC, averaged over donors."""
    rho, jaccard = [], []
    for donor, truth in observed.items():
        model = reconstructed[donor]
        rho.append(spearmanr(truth, model).statistic)
        top_truth = set(np.argsort(-np.abs(truth))[:TOP_DEGS])
        top_model = set(np.argsort(-np.abs(model))[:TOP_DEGS])
        jaccard.append(len(top_truth & top_model) / len(top_truth | top_model))
    return {"logfc_spearman": float(np.mean(rho)), "deg_jaccard": float(np.mean(jaccard))}


def reconstruct(method: str, healthy: ad.AnnData, covid: ad.AnnData, genes: pd.Index, budget_s: float):
    """Normalised expression (library 10,000) of ``genes`` for the healthy cells and the zero-shot COVID cells."""
    budget = timedelta(seconds=budget_s)
    reference = healthy.copy()
    query = covid.copy()
    if method == "sctrilemma":
        SCTrilemma.setup_anndata(reference, donor_key="donor")
        model = SCTrilemma(reference)
        model.train(max_epochs=10_000, max_time=budget, enable_progress_bar=False)
        query_model = SCTrilemma.load_query_data(query, model, donor_key="donor")
    else:
        scvi.model.SCVI.setup_anndata(reference)
        model = scvi.model.SCVI(reference, gene_likelihood="zinb")
        model.train(max_time=budget, enable_progress_bar=False)
        scvi.model.SCVI.prepare_query_anndata(query, model)
        query_model = scvi.model.SCVI.load_query_data(query, model)
        query_model.is_trained_ = True  # zero-shot: the reference's weights, no query training
    kwargs = {"gene_list": list(genes), "library_size": 1e4, "return_numpy": True}
    return model.get_normalized_expression(**kwargs), query_model.get_normalized_expression(**kwargs), query_model


def run(method: str, seed: int, n_genes: int, budget_s: float) -> dict:
    """One method and seed: the reconstruction's disease response against the observed one."""
    scvi.settings.seed = seed
    healthy, covid = load()
    # in the data's gene order: scVI returns gene_list's genes in that order, whatever the list's
    genes = healthy.var_names[healthy.var_names.isin(most_expressed(healthy, n_genes))]
    start = time.perf_counter()
    healthy_model, covid_model, query_model = reconstruct(method, healthy, covid, genes, budget_s)
    donors = covid.obs["donor"].to_numpy()
    query_donors = query_model.adata.obs["donor"].astype(str).to_numpy()
    observed_healthy, observed_covid = observed_cp10k(healthy, genes), observed_cp10k(covid, genes)
    observed = {d: logfc(observed_covid[donors == d], observed_healthy) for d in np.unique(donors)}
    reconstructed = {d: logfc(covid_model[query_donors == d], healthy_model) for d in np.unique(donors)}
    return {
        "method": method,
        "seed": seed,
        "seconds": round(time.perf_counter() - start, 1),
        **scores(observed, reconstructed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=["sctrilemma", "scvi"], choices=["sctrilemma", "scvi"])
    parser.add_argument("--genes", type=int, default=2000, help="the most expressed genes the logFC is compared on")
    parser.add_argument("--budget-s", type=float, default=120.0, help="training seconds per model")
    parser.add_argument("--threads", type=int, default=1, help="torch's thread count, pinned for every method")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/output/disease_response"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    rows = []
    for seed in args.seeds:
        for method in args.methods:
            rows.append(run(method, seed, args.genes, args.budget_s))
            print(json.dumps(rows[-1]), flush=True)
            (args.out / "runs.json").write_text(json.dumps(rows, indent=1))
    frame = pd.DataFrame(rows).groupby("method")[["logfc_spearman", "deg_jaccard"]].agg(["mean", "std"])
    print(frame.round(3).to_string())


if __name__ == "__main__":
    main()
