"""Zero-shot queries of blood references, side by side: SCTrilemma, scVI's scArches path and a projected PCA.

The query is always Kang 2018's held-out donors (1256 and 1488, 3,678 cells, Kang's own 2,511 genes, cell types
known), embedded without any training. The references (``scripts/train_blood_reference.py`` builds their cells):

- ``leave_kang_out``: COMBAT 2022 and the 10x PBMC demo sets, no Kang cells: another study, chemistry and donors;
- ``multi_study``: all three studies, Kang's other three donors included;
- ``single_study``: Kang's other three donors only.

Each reference is trained three ways on the same cells: SCTrilemma (small preset defaults, the study as
``dataset_key``, the donor as ``donor_key``) and scVI (scvi-tools defaults, no covariate) each for ``--budget-s``
seconds of wall clock (``max_time``), then queried by ``load_query_data`` with no training; and a PCA of the
reference's log1p-CP10K highly variable genes, onto which the query is projected. Scores: k-means NMI and ARI, 15-NN
cross-donor cell-type accuracy and BRAS over the two query donors, and (references with Kang cells) the accuracy
of the reference's cell types transferred by the same classifier on every method's embedding
(:class:`sctrilemma.model.LabelClassifier`).
Where the reference holds several studies, ``study_mixing`` is the mean fraction of a reference cell's 15 nearest
neighbours (in the reference's own embedding) that come from another study. ``--methods sctrilemma_all_genes`` is the
ablation in which every gene counts as measured in every study; ``--model-kwargs JSON`` passes SCTrilemma options (a
probe, labelled in the method's name).

Usage: ``OMP_NUM_THREADS=1 python benchmarks/zero_shot.py [--budget-s 240] [--seeds 0 1 2] [--settings ...]
[--out benchmarks/output/zero_shot]``; ``--summarize`` tabulates every ``runs_*.json`` in ``--out``
(mean ± SD over seeds) into ``summary_table.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from pathlib import Path
from unittest.mock import patch

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp
import scvi
import torch

from sctrilemma import SCTrilemma
from sctrilemma._normalize import log1p_cp10k
from sctrilemma.model import LabelClassifier
from sctrilemma.model import _model as model_module

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from train_blood_reference import (
    label_transfer_figures,
    load_blood_data,
    query_cells,
    reference_cells,
    zero_shot_figures,
)

OUTPUT = Path(__file__).resolve().parent / "output"  # raw output, git-ignored
SETTINGS = {
    "leave_kang_out": ["COMBAT2022", "10xPBMC"],
    "multi_study": ["Kang2018", "COMBAT2022", "10xPBMC"],
    "single_study": ["Kang2018"],
}
N_TOP_GENES, N_COMPS = 2000, 50


def measured_genes_rule(on: bool) -> AbstractContextManager:
    """A context in which training keeps the measured-genes rule (``on``) or takes every gene as measured everywhere."""
    return nullcontext() if on else patch.object(model_module, "measured_genes_per_dataset", lambda _: None)


def train_reference(
    reference: ad.AnnData, budget_s: float, measured_genes: bool = True, model_kwargs: dict | None = None
) -> tuple[SCTrilemma, dict]:
    """SCTrilemma (small preset, the study as ``dataset_key``, the donor as ``donor_key``) trained on a copy of
    ``reference`` for ``budget_s`` seconds; returns the model and its training facts.

    ``measured_genes=False`` is the ablation that takes every gene as measured in every study.
    """
    reference = reference.copy()
    SCTrilemma.setup_anndata(reference, donor_key="donor", dataset_key="study")
    model = SCTrilemma(reference, preset="small", **(model_kwargs or {}))
    start = time.perf_counter()
    with measured_genes_rule(measured_genes):
        model.train(max_epochs=10_000, max_time=timedelta(seconds=budget_s), enable_progress_bar=False)
    return model, {"train_s": round(time.perf_counter() - start, 1), "steps": int(model.trainer.global_step)}


def sctrilemma_zero_shot(
    reference: ad.AnnData,
    query: ad.AnnData,
    budget_s: float,
    measured_genes: bool = True,
    model_kwargs: dict | None = None,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Train on ``reference`` (:func:`train_reference`), then embed both; returns the embeddings and training facts."""
    model, facts = train_reference(reference, budget_s, measured_genes, model_kwargs)
    query_model = SCTrilemma.load_query_data(query.copy(), model)
    return model.get_latent_representation(), query_model.get_latent_representation(), facts


def scvi_zero_shot(reference: ad.AnnData, query: ad.AnnData, budget_s: float) -> tuple[np.ndarray, np.ndarray, dict]:
    """ScVI (defaults, no covariate) for ``budget_s`` seconds, then the scArches path with no query training."""
    reference = reference.copy()
    scvi.model.SCVI.setup_anndata(reference)
    model = scvi.model.SCVI(reference, gene_likelihood="zinb")
    start = time.perf_counter()
    model.train(max_time=timedelta(seconds=budget_s), enable_progress_bar=False)
    facts = {"train_s": round(time.perf_counter() - start, 1), "epochs": int(model.history["elbo_train"].shape[0])}
    work = query.copy()
    work.var_names = work.var_names.astype(str)
    scvi.model.SCVI.prepare_query_anndata(work, model)
    query_model = scvi.model.SCVI.load_query_data(work, model)
    query_model.is_trained_ = True  # zero-shot: the reference's weights, no query training
    return model.get_latent_representation(), query_model.get_latent_representation(), facts


def pca_zero_shot(reference: ad.AnnData, query: ad.AnnData, seed: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """PCA of the reference's log1p-CP10K highly variable genes; the query is projected on its loadings."""
    import scanpy as sc

    threads = torch.get_num_threads()
    try:
        work = ad.AnnData(log1p_cp10k(reference.X), var=pd.DataFrame(index=reference.var_names))
        sc.pp.highly_variable_genes(work, n_top_genes=min(N_TOP_GENES, reference.n_vars - 1))
        hvg = work.var["highly_variable"].to_numpy()
        n_comps = min(N_COMPS, int(hvg.sum()) - 1, reference.n_obs - 1)  # fewer only for a very small reference
        sc.pp.pca(work, n_comps=n_comps, mask_var="highly_variable", random_state=seed)
    finally:  # scanpy raises torch's thread count (see sctrilemma.benchmark.pca_baseline)
        torch.set_num_threads(threads)
    genes, loadings = work.var_names[hvg], work.varm["PCs"][hvg]
    mean = np.asarray(work.X[:, hvg].mean(0)).ravel()
    # The query normalised over its own genes, in the reference's gene order (zero for genes it did not measure).
    query_log = sp.csr_matrix(log1p_cp10k(query.X))
    position = query.var_names.get_indexer(genes)
    aligned = np.zeros((query.n_obs, genes.size), dtype=np.float32)
    aligned[:, position >= 0] = query_log[:, position[position >= 0]].toarray()
    return np.asarray(work.obsm["X_pca"]), (aligned - mean) @ loadings, {"n_hvg": int(genes.size)}


def transfer_accuracy(reference_embedding: np.ndarray, reference: ad.AnnData, embedding: np.ndarray, query) -> dict:
    """Accuracy of the reference's Kang cell types transferred to the query (the package's classifier, with unknowns)."""
    classifier = LabelClassifier.fit(reference_embedding, reference.obs["cell_type"].to_numpy())
    return label_transfer_figures(classifier.predict(embedding), query)


def other_study_shares(embedding: np.ndarray, studies: np.ndarray, n_neighbors: int = 15) -> np.ndarray:
    """Per cell, the fraction of its ``n_neighbors`` nearest neighbours that come from another study."""
    from sklearn.neighbors import NearestNeighbors

    neighbours = NearestNeighbors(n_neighbors=n_neighbors + 1).fit(embedding).kneighbors(embedding)[1][:, 1:]
    return (studies[neighbours] != studies[:, None]).mean(axis=1)


def study_mixing(embedding: np.ndarray, studies: np.ndarray, n_neighbors: int = 15) -> float:
    """Mean fraction of a reference cell's ``n_neighbors`` nearest neighbours that come from another study."""
    return float(other_study_shares(embedding, studies, n_neighbors).mean())


def run(
    blood: ad.AnnData, setting: str, seed: int, budget_s: float, methods: list[str], model_kwargs: dict | None = None
) -> list[dict]:
    """Every method's zero-shot figures for one reference setting and seed."""
    reference, query = reference_cells(blood, SETTINGS[setting]), query_cells(blood)
    rows = []
    for method in methods:
        scvi.settings.seed = seed
        start = time.strftime("%H:%M:%S")
        if method.startswith("sctrilemma"):
            measured = method != "sctrilemma_all_genes"
            ref_z, query_z, facts = sctrilemma_zero_shot(reference, query, budget_s, measured, model_kwargs)
        elif method == "scvi":
            ref_z, query_z, facts = scvi_zero_shot(reference, query, budget_s)
        else:
            ref_z, query_z, facts = pca_zero_shot(reference, query, seed)
        figures = zero_shot_figures(query_z, query, seed=seed)
        if reference.obs["cell_type"].notna().any():
            figures.update(transfer_accuracy(ref_z, reference, query_z, query))
        if reference.obs["study"].nunique() > 1:
            figures["study_mixing"] = round(study_mixing(ref_z, reference.obs["study"].astype(str).to_numpy()), 4)
        if model_kwargs and method.startswith("sctrilemma"):
            method = f"{method} {json.dumps(model_kwargs)}"
        row = {"setting": setting, "method": method, "seed": seed, "started": start, **facts, **figures}
        row["reference_cells"], row["reference_genes"] = int(reference.n_obs), int(reference.n_vars)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


FIGURES = (
    "nmi",
    "ari",
    "knn_cross_donor_accuracy",
    "bras",
    "label_transfer_accuracy",
    "label_transfer_unknown_rate",
    "study_mixing",
)


def summarize(rows: list[dict]) -> str:
    """Mean ± SD over seeds per setting and method, as a Markdown table."""
    frame = pd.DataFrame(rows)
    methods = ["sctrilemma", "sctrilemma_all_genes", "scvi", "pca"]
    rank = {method: i for i, method in enumerate(methods)}
    frame["order"] = frame["setting"].map(list(SETTINGS).index) * 10 + frame["method"].map(lambda m: rank.get(m, 2))
    frame = frame.sort_values(["order", "seed"])
    lines = ["| setting | method | seeds | " + " | ".join(FIGURES) + " |", "|---" * (len(FIGURES) + 3) + "|"]
    for (setting, method), group in frame.groupby(["setting", "method"], sort=False):
        cells = []
        for figure in FIGURES:
            values = group[figure].dropna() if figure in group else pd.Series(dtype=float)
            cells.append("–" if values.empty else f"{values.mean():.3f} ± {values.std(ddof=0):.3f}")
        lines.append(f"| {setting} | {method} | {len(group)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default=str(Path(__file__).parents[1] / ".." / "shared" / "data"))
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["sctrilemma", "scvi", "pca"],
        choices=["sctrilemma", "scvi", "pca", "sctrilemma_all_genes"],
    )
    parser.add_argument("--out", default=str(OUTPUT / "zero_shot"))
    parser.add_argument("--summarize", action="store_true", help="only tabulate the runs in --out")
    parser.add_argument("--model-kwargs", type=json.loads, default=None, help="SCTrilemma options as JSON (a probe)")
    args = parser.parse_args()
    out = Path(args.out)
    if args.summarize:
        rows = [row for path in sorted(out.glob("runs_*.json")) for row in json.loads(path.read_text())]
        (out / "summary_table.md").write_text(summarize(rows))
        print(summarize(rows))
        return
    torch.set_num_threads(1)
    blood = load_blood_data(args.data_dir)
    out.mkdir(parents=True, exist_ok=True)
    probe = "_" + "_".join(f"{k}-{v}" for k, v in args.model_kwargs.items()) if args.model_kwargs else ""
    tag = "_".join(args.methods) + probe + "_" + "_".join(map(str, args.seeds))
    rows = [
        row
        for seed in args.seeds
        for setting in args.settings
        for row in run(blood, setting, seed, args.budget_s, args.methods, args.model_kwargs)
    ]
    (out / f"runs_{tag}.json").write_text(json.dumps(rows, indent=1))
    print(summarize(rows))


if __name__ == "__main__":
    main()
