"""Label transfer across a labelled shift, with a cell type the reference lacks, side by side with baselines.

Each split trains a reference on one part of a shared data set, with one cell type left out, and labels another
part that comes from another chemistry, donors or species:

- ``cellbench_celseq2_to_dropseq`` / ``cellbench_dropseq_to_celseq2``: CellBench's lung cell lines, reference on
  one technology, query the other (labels from SNP genotypes); the reference's batches are its datasets;
- ``kang_donors``: Kang 2018 PBMCs, donors 1015, 1016 and 1244 as the reference, 1256 and 1488 as the query;
- ``baron_human_to_mouse``: Baron 2016 islets, human reference, mouse query (genes matched by upper-case symbol).

In each split the left-out type (``LEFT_OUT``) is the alphabetically first of the query's types; query types that
the reference lacks (the left-out one, and on CellBench's reverse split two lines Drop-seq never had) must come out
``unknown``. Methods, each on the same cells:

- ``sctrilemma``: the small preset trained for ``--budget-s`` seconds, the query embedded zero-shot
  (``load_query_data``), labels from :meth:`~sctrilemma.SCTrilemma.fit_label_classifier` on the reference cells'
  embedding and :meth:`~sctrilemma.SCTrilemma.predict_labels` on the query's;
- ``celltypist``: CellTypist's recipe, a one-vs-rest logistic regression on scaled log1p-CP10K expression of the
  shared genes, a cell unknown when no class reaches probability 0.5;
- ``scanvi``: scVI then scANVI on the reference (scvi-tools defaults, ``--budget-s`` seconds in all), the query
  mapped the scArches way (``load_query_data``, 100 epochs, ``weight_decay=0``), a cell unknown when its largest
  class probability is below 0.5;
- ``pca_knn``: a PCA of the reference's log1p-CP10K highly variable genes, the query projected on its loadings,
  labelled by a distance-weighted 15-nearest-neighbour vote, unknown when the vote's winner has under 0.5.

Figures per split and method: ``accuracy_known`` (accuracy over the query cells of types the reference knows,
unknown counted as wrong), ``known_unknown_rate`` (share of those cells called unknown) and ``novel_recall`` (share
of the cells of types the reference lacks called unknown).

Usage: ``OMP_NUM_THREADS=1 python benchmarks/label_transfer.py [--seeds 0 1 2] [--splits ...] [--methods ...]
[--budget-s 120] [--out benchmarks/output/label_transfer]``. Each run writes ``runs_<split>_<method>_<seed>.json``
(and, for ``sctrilemma``, the two embeddings) and skips runs already there unless ``--rerun``; ``--summarize``
tabulates them (mean ± SD over seeds); ``--rescore`` labels the saved embeddings again with the package's current
classifier (no training) before tabulating.
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

from sctrilemma import SCTrilemma
from sctrilemma._normalize import log1p_cp10k

DATA = Path(__file__).parents[1].parent / "shared" / "data"
UNKNOWN = "unknown"
SPLITS = ("cellbench_celseq2_to_dropseq", "cellbench_dropseq_to_celseq2", "kang_donors", "baron_human_to_mouse")
METHODS = ("sctrilemma", "celltypist", "scanvi", "pca_knn")
LEFT_OUT = {
    "cellbench_celseq2_to_dropseq": "H1975",
    "cellbench_dropseq_to_celseq2": "H1975",
    "kang_donors": "B cells",
    "baron_human_to_mouse": "activated_stellate",
}


def _plain(adata: ad.AnnData, obs: list[str]) -> ad.AnnData:
    """A copy with raw counts in ``X`` (CSR float32), the given ``obs`` columns as strings and unique names."""
    out = ad.AnnData(X=sp.csr_matrix(adata.X, dtype=np.float32), var=pd.DataFrame(index=adata.var_names.astype(str)))
    out.obs_names = [f"{name}-{i}" for i, name in enumerate(adata.obs_names.astype(str))]
    for column in obs:
        out.obs[column] = adata.obs[column].astype(str).to_numpy()
    return out


def load_split(name: str, data_dir: Path = DATA) -> tuple[ad.AnnData, ad.AnnData, dict]:
    """The split's reference (left-out type removed) and query, with ``obs``: ``cell_type`` and ``context``.

    ``context`` is the reference's donors (Kang) or batches/species (the others); the third value says which
    set-up argument it is.
    """
    if name.startswith("cellbench"):
        adata = ad.read_h5ad(data_dir / "cellbench_lung_celllines.h5ad")
        adata.obs["context"] = adata.obs["batch"]
        ref_tech, query_tech = ("CEL-seq2", "Drop-seq") if name.endswith("to_dropseq") else ("Drop-seq", "CEL-seq2")
        reference = adata[adata.obs["technology"] == ref_tech]
        query = adata[adata.obs["technology"] == query_tech]
        role = "dataset_key"
    elif name == "kang_donors":
        adata = ad.read_h5ad(data_dir / "kang2018_pbmc_ctrl.h5ad")
        adata.obs["context"] = adata.obs["donor"]
        query_donors = adata.obs["donor"].astype(str).isin(["1256", "1488"])
        reference, query = adata[~query_donors], adata[query_donors]
        role = "donor_key"
    elif name == "baron_human_to_mouse":
        adata = ad.read_h5ad(data_dir / "baron2016_pancreas_subset_cider.h5ad")
        adata.obs["context"] = adata.obs["species"]
        reference, query = adata[adata.obs["species"] == "human"], adata[adata.obs["species"] == "mouse"]
        role = "dataset_key"
    else:
        raise ValueError(f"Unknown split {name!r}; choose from {SPLITS}.")
    reference = reference[reference.obs["cell_type"].astype(str) != LEFT_OUT[name]]
    reference, query = _plain(reference, ["cell_type", "context"]), _plain(query, ["cell_type", "context"])
    expressed = np.asarray((reference.X > 0).sum(0)).ravel() > 0  # genes the reference's cells express
    return reference[:, expressed].copy(), query, {"context": role}


def figures(prediction: np.ndarray, query: ad.AnnData, known: set[str]) -> dict[str, float]:
    """Accuracy on known types, their unknown rate and the unknown rate of types the reference lacks."""
    truth = query.obs["cell_type"].astype(str).to_numpy()
    prediction = np.asarray(prediction, dtype=object).astype(str)
    is_known = np.isin(truth, list(known))
    return {
        "accuracy_known": float((prediction[is_known] == truth[is_known]).mean()),
        "known_unknown_rate": float((prediction[is_known] == UNKNOWN).mean()),
        "novel_recall": float((prediction[~is_known] == UNKNOWN).mean()) if (~is_known).any() else float("nan"),
        "n_known": int(is_known.sum()),
        "n_novel": int((~is_known).sum()),
    }


# ------------------------------------------------------------------ methods
def run_sctrilemma(reference: ad.AnnData, query: ad.AnnData, role: str, budget_s: float, out: Path, tag: str):
    """Train, embed both zero-shot, fit the label classifier on the reference and predict the query."""
    reference = reference.copy()
    SCTrilemma.setup_anndata(reference, **{role: "context"})
    model = SCTrilemma(reference, preset="small")
    start = time.perf_counter()
    model.train(max_epochs=10_000, max_time=timedelta(seconds=budget_s), enable_progress_bar=False)
    facts = {"train_s": round(time.perf_counter() - start, 1), "steps": int(model.trainer.global_step)}
    model.fit_label_classifier("cell_type")
    query_model = SCTrilemma.load_query_data(query.copy(), model, **({role: "context"}))
    np.save(out / f"{tag}_reference.npy", model.get_latent_representation())
    np.save(out / f"{tag}_query.npy", query_model.get_latent_representation())
    return query_model.predict_labels()["prediction"].to_numpy(), facts


def _aligned_log(reference: ad.AnnData, query: ad.AnnData, genes: pd.Index) -> tuple[np.ndarray, np.ndarray]:
    """log1p-CP10K of both (each normalised over its own genes) in ``genes``' order; absent genes are zero."""
    result = []
    for adata in (reference, query):
        log = sp.csr_matrix(log1p_cp10k(adata.X))
        position = adata.var_names.get_indexer(genes)
        aligned = np.zeros((adata.n_obs, genes.size), dtype=np.float32)
        aligned[:, position >= 0] = log[:, position[position >= 0]].toarray()
        result.append(aligned)
    return result[0], result[1]


def run_celltypist(reference: ad.AnnData, query: ad.AnnData, seed: int):
    """CellTypist's recipe: scaled log1p-CP10K, one-vs-rest logistic regression, 0.5 probability rule."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.preprocessing import StandardScaler

    genes = reference.var_names.intersection(query.var_names)
    x_reference, x_query = _aligned_log(reference, query, genes)
    scaler = StandardScaler().fit(x_reference)
    scale = lambda x: np.clip(scaler.transform(x), -10, 10)  # CellTypist clips scaled values at 10
    classifier = OneVsRestClassifier(LogisticRegression(max_iter=1000, random_state=seed))
    classifier.fit(scale(x_reference), reference.obs["cell_type"].to_numpy())
    decision = classifier.decision_function(scale(x_query))
    if decision.ndim == 1:  # two classes: one score, for the second
        decision = np.stack([-decision, decision], axis=1)
    probability = 1 / (1 + np.exp(-decision))
    best = probability.argmax(1)
    prediction = np.where(probability.max(1) >= 0.5, classifier.classes_[best], UNKNOWN)
    return prediction, {"n_genes": int(genes.size)}


def run_scanvi(reference: ad.AnnData, query: ad.AnnData, budget_s: float, seed: int):
    """scVI + scANVI on the reference, the query mapped by scArches, 0.5 probability rule."""
    reference = reference.copy()
    scvi.model.SCVI.setup_anndata(reference, batch_key="context", labels_key="cell_type")
    start = time.perf_counter()
    vae = scvi.model.SCVI(reference, gene_likelihood="zinb")
    vae.train(max_epochs=400, max_time=timedelta(seconds=budget_s / 2), enable_progress_bar=False)
    scanvi = scvi.model.SCANVI.from_scvi_model(vae, unlabeled_category="Unknown")
    scanvi.train(max_epochs=20, max_time=timedelta(seconds=budget_s / 2), enable_progress_bar=False)
    train_s = time.perf_counter() - start
    work = query.copy()
    work.obs["cell_type"] = "Unknown"
    scvi.model.SCANVI.prepare_query_anndata(work, scanvi)
    query_model = scvi.model.SCANVI.load_query_data(work, scanvi)
    query_model.train(max_epochs=100, plan_kwargs={"weight_decay": 0.0}, enable_progress_bar=False)
    probability = query_model.predict(soft=True)
    prediction = np.where(probability.max(1).to_numpy() >= 0.5, probability.idxmax(1).to_numpy(), UNKNOWN)
    return prediction, {"train_s": round(train_s, 1)}


def run_pca_knn(reference: ad.AnnData, query: ad.AnnData, seed: int):
    """A projected PCA (``zero_shot.py``'s) and a distance-weighted 15-NN vote, 0.5 probability rule."""
    from sklearn.neighbors import KNeighborsClassifier
    from zero_shot import pca_zero_shot

    reference_pca, query_pca, facts = pca_zero_shot(reference, query, seed)
    vote = KNeighborsClassifier(n_neighbors=15, weights="distance").fit(reference_pca, reference.obs["cell_type"])
    probability = vote.predict_proba(query_pca)
    prediction = np.where(probability.max(1) >= 0.5, vote.classes_[probability.argmax(1)], UNKNOWN)
    return prediction, facts


def run(split: str, method: str, seed: int, budget_s: float, out: Path) -> dict:
    """One split, method and seed; returns the figures and the run's facts."""
    scvi.settings.seed = seed
    reference, query, roles = load_split(split)
    tag = f"{split}_{method}_{seed}"
    start = time.perf_counter()
    if method == "sctrilemma":
        prediction, facts = run_sctrilemma(reference, query, roles["context"], budget_s, out, tag)
    elif method == "celltypist":
        prediction, facts = run_celltypist(reference, query, seed)
    elif method == "scanvi":
        prediction, facts = run_scanvi(reference, query, budget_s, seed)
    else:
        prediction, facts = run_pca_knn(reference, query, seed)
    known = set(reference.obs["cell_type"])
    row = {"split": split, "method": method, "seed": seed, **figures(prediction, query, known), **facts}
    row["wall_s"] = round(time.perf_counter() - start, 1)
    (out / f"runs_{tag}.json").write_text(json.dumps(row, indent=1))
    return row


def rescore(out: Path) -> None:
    """Label the saved ``sctrilemma`` embeddings again with today's classifier, without training anew."""
    from sctrilemma.model import LabelClassifier

    for path in sorted(out.glob("runs_*_sctrilemma_*.json")):
        row = json.loads(path.read_text())
        tag = f"{row['split']}_sctrilemma_{row['seed']}"
        reference, query, _ = load_split(row["split"])
        classifier = LabelClassifier.fit(np.load(out / f"{tag}_reference.npy"), reference.obs["cell_type"])
        prediction = classifier.predict(np.load(out / f"{tag}_query.npy"))["prediction"].to_numpy()
        row.update(figures(prediction, query, set(reference.obs["cell_type"])))
        path.write_text(json.dumps(row, indent=1))


def summarize(rows: list[dict]) -> str:
    """A markdown table of mean ± SD over seeds, per split and method."""
    frame = pd.DataFrame(rows)
    lines = [
        "| split | method | seeds | accuracy on known | known called unknown | left-out called unknown |",
        "|---|---|---|---|---|---|",
    ]
    for (split, method), group in frame.groupby(["split", "method"], sort=False):
        cells = [
            f"{group[c].mean():.3f} ± {group[c].std(ddof=1) if len(group) > 1 else 0:.3f}"
            for c in ("accuracy_known", "known_unknown_rate", "novel_recall")
        ]
        lines.append(f"| {split} | {method} | {len(group)} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget-s", type=float, default=120.0, help="training seconds per trained model")
    parser.add_argument("--threads", type=int, default=1, help="torch's thread count, pinned for every method")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/output/label_transfer"))
    parser.add_argument("--summarize", action="store_true", help="only tabulate the runs in --out")
    parser.add_argument("--rerun", action="store_true", help="run again what --out already holds")
    parser.add_argument(
        "--rescore", action="store_true", help="label the saved sctrilemma embeddings in --out again, then tabulate"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.rescore:
        rescore(args.out)
    elif not args.summarize:
        torch.set_num_threads(args.threads)
        for seed in args.seeds:
            for split in args.splits:
                for method in args.methods:
                    if (args.out / f"runs_{split}_{method}_{seed}.json").exists() and not args.rerun:
                        continue
                    row = run(split, method, seed, args.budget_s, args.out)
                    print(json.dumps(row), flush=True)
    rows = [json.loads(path.read_text()) for path in sorted(args.out.glob("runs_*.json"))]
    table = summarize(rows)
    (args.out / "summary.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
