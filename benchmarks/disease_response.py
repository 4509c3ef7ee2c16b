"""The paper's disease-contrast check: does a zero-shot reconstruction keep a disease's expression response?

COMBAT 2022 blood (the default): the reference is trained on its two healthy donors; the cells of its four COVID-19
donors (two mild, two critical) are embedded zero-shot and reconstructed. Per COVID-19 donor, the logFC of each
gene's mean CP10K against the healthy donors' is computed from the observed counts and from the reconstruction (the
model's normalised expression at a library of 10,000, healthy cells by the reference, COVID-19 cells by the query
model), over the ``--genes`` most expressed genes. Scores, averaged over the four donors: Spearman ρ of
reconstructed against observed logFC, and the Jaccard index of the top-100 genes by |logFC|.

Any other contrast (``--reference`` and ``--query``): the reference is trained on ``--reference``'s cells; the query,
which holds both arms of a condition no reference cell has (a stimulus, a disease), is mapped zero-shot. Per group of
``--group-key`` (e.g. cell type; one group without it), the logFC of the treated against the ``--control`` cells of
the query is compared, observed against reconstructed by the query model, with the same two scores averaged over the
groups of at least 30 cells in each arm. The reference is trained on the genes the query measures, as scVI's
scArches path needs. ``--symbol-key`` names the reference's gene-symbol column where the query is named by symbols.

Methods, each trained on the reference for ``--budget-s`` seconds: SCTrilemma (small preset, donors as
``donor_key``, the query mapped by ``load_query_data``) and scVI (scvi-tools defaults, no covariate, the query by
scArches' ``load_query_data`` without training).

Usage: ``OMP_NUM_THREADS=1 python benchmarks/disease_response.py [--seeds 0 1 2] [--budget-s 120]
[--out benchmarks/output/disease_response]``; another contrast: ``--reference REF.h5ad --query QUERY.h5ad
--condition-key condition --control ctrl [--group-key cell_type] [--donor-key donor] [--symbol-key gene_symbol]``;
``--model '{"encoder_genes": "all"}'`` sets SCTrilemma's constructor arguments.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
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
MIN_CELLS = 30  # per arm of a group in a query's own contrast
PSEUDOCOUNT = 0.01  # in CP10K


@dataclass
class Contrast:
    """A reference, a zero-shot query, and which query cells are compared with which.

    ``arms`` maps each compared unit (a COVID-19 donor, a cell type) to its case cells in the query and its control
    cells, in the query (``within_query``) or else the reference's cells.
    """

    reference: ad.AnnData
    query: ad.AnnData
    donor_key: str | None
    min_overlap: float
    arms: dict[str, tuple[np.ndarray, np.ndarray | None]]
    within_query: bool


def raw_counts(adata: ad.AnnData) -> ad.AnnData:
    """``adata`` with float32 CSR counts and a string ``donor`` column where it has one."""
    adata.X = sp.csr_matrix(adata.X, dtype=np.float32)
    if "donor" in adata.obs:
        adata.obs["donor"] = adata.obs["donor"].astype(str)
    return adata


def combat() -> Contrast:
    """COMBAT's healthy cells (the reference) and COVID-19 cells (the query), each donor against the healthy."""
    adata = raw_counts(ad.read_h5ad(DATA))
    healthy = (adata.obs["condition"] == HEALTHY).to_numpy()
    covid = adata[~healthy].copy()
    donors = covid.obs["donor"].to_numpy()
    arms = {donor: (donors == donor, None) for donor in np.unique(donors)}
    return Contrast(adata[healthy].copy(), covid, "donor", 0.5, arms, within_query=False)


def query_contrast(args: argparse.Namespace) -> Contrast:
    """``--reference``'s cells and a ``--query`` holding both arms of ``--condition-key``, per ``--group-key``."""
    reference, query = raw_counts(ad.read_h5ad(args.reference)), raw_counts(ad.read_h5ad(args.query))
    if args.symbol_key is not None:
        reference.var_names = reference.var[args.symbol_key].astype(str).to_numpy()
        reference.var_names_make_unique()
    query.obs_names_make_unique()
    reference = reference[:, reference.var_names.isin(query.var_names)].copy()  # scArches needs the query's genes
    condition = query.obs[args.condition_key].astype(str).to_numpy()
    if args.control not in set(condition):
        raise ValueError(
            f"No query cell has {args.condition_key}={args.control!r}; its values: {sorted(set(condition))}."
        )
    groups = query.obs[args.group_key].astype(str).to_numpy() if args.group_key else np.full(query.n_obs, "all")
    arms = {}
    for group in np.unique(groups):
        case, control = (groups == group) & (condition != args.control), (groups == group) & (condition == args.control)
        if case.sum() >= MIN_CELLS and control.sum() >= MIN_CELLS:
            arms[group] = (case, control)
    if not arms:
        raise ValueError(f"No group has {MIN_CELLS} query cells in each arm of {args.condition_key!r}.")
    donor_key = args.donor_key if args.donor_key in reference.obs else None
    if donor_key is not None and donor_key not in query.obs:
        query.obs[donor_key] = "query"
    return Contrast(reference, query, donor_key, args.min_overlap, arms, within_query=True)


def cp10k(adata: ad.AnnData) -> sp.csr_matrix:
    """Each cell's counts per 10,000, ``(n_cells, n_genes)``."""
    return sp.csr_matrix(sp.diags(1e4 / np.maximum(np.asarray(adata.X.sum(1)).ravel(), 1.0)) @ adata.X)


def compared_genes(contrast: Contrast, n_genes: int) -> pd.Index:
    """The ``n_genes`` reference genes of highest mean CP10K in the query, in the reference's order.

    scVI returns ``gene_list``'s genes in the data's order, whatever the list's.
    """
    shared = contrast.reference.var_names[contrast.reference.var_names.isin(contrast.query.var_names)]
    source = contrast.query if contrast.within_query else contrast.reference
    mean = np.asarray(cp10k(source)[:, source.var_names.get_indexer(shared)].mean(0)).ravel()
    return shared[shared.isin(shared[np.argsort(-mean)[:n_genes]])]


def observed_cp10k(adata: ad.AnnData, genes: pd.Index) -> np.ndarray:
    """Each cell's CP10K of ``genes``, ``(n_cells, n_genes)``."""
    return np.asarray(cp10k(adata)[:, adata.var_names.get_indexer(genes)].todense())


def logfc(case: np.ndarray, control: np.ndarray) -> np.ndarray:
    """log of the mean expression ratio per gene."""
    return np.log((case.mean(0) + PSEUDOCOUNT) / (control.mean(0) + PSEUDOCOUNT))


def scores(observed: dict[str, np.ndarray], reconstructed: dict[str, np.ndarray]) -> dict[str, float]:
    """Spearman ρ and top-DEG Jaccard of reconstructed against observed logFC, averaged over the compared units."""
    rho, jaccard = [], []
    for unit, truth in observed.items():
        model = reconstructed[unit]
        rho.append(spearmanr(truth, model).statistic)
        top_truth = set(np.argsort(-np.abs(truth))[:TOP_DEGS])
        top_model = set(np.argsort(-np.abs(model))[:TOP_DEGS])
        jaccard.append(len(top_truth & top_model) / len(top_truth | top_model))
    return {"logfc_spearman": float(np.mean(rho)), "deg_jaccard": float(np.mean(jaccard))}


def reconstruct(method: str, contrast: Contrast, genes: pd.Index, budget_s: float, model_kwargs: dict):
    """Normalised expression (library 10,000) of ``genes``: reference cells (``None`` when not compared), query."""
    budget = timedelta(seconds=budget_s)
    reference, query = contrast.reference.copy(), contrast.query.copy()
    if method == "sctrilemma":
        SCTrilemma.setup_anndata(reference, donor_key=contrast.donor_key)
        model = SCTrilemma(reference, **model_kwargs)
        model.train(max_epochs=10_000, max_time=budget, enable_progress_bar=False)
        query_model = SCTrilemma.load_query_data(
            query, model, donor_key=contrast.donor_key, min_overlap=contrast.min_overlap
        )
    else:
        scvi.model.SCVI.setup_anndata(reference)
        model = scvi.model.SCVI(reference, gene_likelihood="zinb")
        model.train(max_time=budget, enable_progress_bar=False)
        scvi.model.SCVI.prepare_query_anndata(query, model)
        query_model = scvi.model.SCVI.load_query_data(query, model)
        query_model.is_trained_ = True  # zero-shot: the reference's weights, no query training
    kwargs = {"gene_list": list(genes), "library_size": 1e4, "return_numpy": True}
    reference_expression = None if contrast.within_query else model.get_normalized_expression(**kwargs)
    query_expression = pd.DataFrame(query_model.get_normalized_expression(**kwargs), index=query_model.adata.obs_names)
    return reference_expression, query_expression.loc[contrast.query.obs_names].to_numpy()


def run(method: str, seed: int, n_genes: int, budget_s: float, contrast: Contrast, model_kwargs: dict) -> dict:
    """One method and seed: the reconstruction's response against the observed one."""
    scvi.settings.seed = seed
    genes = compared_genes(contrast, n_genes)
    start = time.perf_counter()
    reference_model, query_model = reconstruct(method, contrast, genes, budget_s, model_kwargs)
    query_observed = observed_cp10k(contrast.query, genes)
    reference_observed = None if contrast.within_query else observed_cp10k(contrast.reference, genes)
    observed, reconstructed = {}, {}
    for unit, (case, control) in contrast.arms.items():
        if control is None:  # against the reference's cells
            observed[unit] = logfc(query_observed[case], reference_observed)
            reconstructed[unit] = logfc(query_model[case], reference_model)
        else:
            observed[unit] = logfc(query_observed[case], query_observed[control])
            reconstructed[unit] = logfc(query_model[case], query_model[control])
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
    parser.add_argument("--model", default="{}", help="SCTrilemma keyword arguments over the default, as JSON")
    parser.add_argument("--reference", type=Path, default=None, help="another contrast: the reference's .h5ad")
    parser.add_argument("--query", type=Path, default=None, help="the query's .h5ad, with both arms of the condition")
    parser.add_argument("--condition-key", default="condition", help="the query's obs column of the condition")
    parser.add_argument("--control", default="ctrl", help="the control arm's value in --condition-key")
    parser.add_argument("--group-key", default=None, help="the query's obs column compared within (e.g. cell type)")
    parser.add_argument("--donor-key", default="donor", help="SCTrilemma's donor column, where the data have it")
    parser.add_argument("--min-overlap", type=float, default=0.5, help="share of the reference's genes a query needs")
    parser.add_argument("--symbol-key", default=None, help="the reference's var column of the query's gene names")
    args = parser.parse_args()
    if (args.reference is None) != (args.query is None):
        parser.error("--reference and --query go together.")
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    contrast = combat() if args.reference is None else query_contrast(args)
    rows = []
    for seed in args.seeds:
        for method in args.methods:
            rows.append(run(method, seed, args.genes, args.budget_s, contrast, json.loads(args.model)))
            print(json.dumps(rows[-1]), flush=True)
            (args.out / "runs.json").write_text(json.dumps(rows, indent=1))
    frame = pd.DataFrame(rows).groupby("method")[["logfc_spearman", "deg_jaccard"]].agg(["mean", "std"])
    print(frame.round(3).to_string())


if __name__ == "__main__":
    main()
