"""Embedding quality of SCTrilemma (small preset) on the shipped example, next to a log1p-CP10K PCA (and scVI).

Trains as ``sctrilemma example`` does (``--max-epochs``, ``--seed``) and scores all 3,000 cells: k-means NMI/ARI
against the cell types (``metrics.nmi_ari_kmeans``, 20 single starts, averaged), the NMI of the lowest-inertia of
those starts, BRAS over donors, depth R² (lower is better), cell-type kNN accuracy (5-fold) and cell-type and donor
silhouettes (cosine). ``--scvi`` adds scVI at its default length (400 epochs here, about 13 minutes on one thread).
Usage: ``python benchmarks/example_quality.py [--quick] [--max-epochs N] [--seed S] [--model JSON] [--scvi]
[--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import scanpy as sc
import scvi
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score, silhouette_score
from sklearn.model_selection import cross_val_score
from sklearn.neighbors import KNeighborsClassifier

import sctrilemma
from sctrilemma import metrics

OUTPUT = Path(__file__).resolve().parent / "output"  # raw output, git-ignored


def lowest_inertia_nmi(embedding: np.ndarray, cell_type: np.ndarray, n_init: int = 20, seed: int = 42) -> float:
    """NMI of the lowest-inertia partition among the single-start k-means runs that ``nmi_ari_kmeans`` averages."""
    k = np.unique(cell_type).size
    starts = [KMeans(k, n_init=1, random_state=seed + r).fit(embedding) for r in range(n_init)]
    best = min(starts, key=lambda kmeans: kmeans.inertia_)
    return float(normalized_mutual_info_score(cell_type, best.labels_))


def knn_accuracy(embedding: np.ndarray, cell_type: np.ndarray, metric: str = "euclidean") -> float:
    """5-fold accuracy of a 15-nearest-neighbour cell-type classifier on ``embedding``."""
    knn = KNeighborsClassifier(n_neighbors=15, metric=metric)
    return float(cross_val_score(knn, embedding, cell_type, cv=5).mean())


def scores(embedding: np.ndarray, cell_type: np.ndarray, donor: np.ndarray, depth: np.ndarray) -> dict[str, float]:
    return {
        **metrics.nmi_ari_kmeans(embedding, cell_type),
        "nmi_lowest_inertia": lowest_inertia_nmi(embedding, cell_type),
        "bras": metrics.bras(embedding, cell_type, donor),
        "depth_r2": metrics.depth_r2(embedding, depth),
        "knn_accuracy": knn_accuracy(embedding, cell_type, metric="cosine"),
        "cell_type_silhouette": float(silhouette_score(embedding, cell_type, metric="cosine")),
        "donor_silhouette": float(silhouette_score(embedding, donor, metric="cosine")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 epochs instead of --max-epochs")
    parser.add_argument("--max-epochs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="{}", help="SCTrilemma keyword arguments, as JSON")
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default: the model's)")
    parser.add_argument("--scvi", action="store_true", help="also train scVI at its default length")
    parser.add_argument("--json", type=Path, default=OUTPUT / "example_quality.json")
    args = parser.parse_args()
    scvi.settings.seed = args.seed
    adata = sctrilemma.data.load_example()
    cell_type, donor = adata.obs["cell_type"].to_numpy(), adata.obs["donor"].to_numpy()
    depth = np.asarray(adata.X.sum(1)).ravel()
    results: dict[str, dict[str, float]] = {}

    sctrilemma.SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = sctrilemma.SCTrilemma(adata, preset="small", **json.loads(args.model))
    start = time.perf_counter()
    plan_kwargs = {} if args.lr is None else {"lr": args.lr}
    model.train(max_epochs=2 if args.quick else args.max_epochs, enable_progress_bar=False, plan_kwargs=plan_kwargs)
    train_seconds = time.perf_counter() - start
    results["sctrilemma_small"] = {
        **scores(model.get_latent_representation(), cell_type, donor, depth),
        "train_s": train_seconds,
    }

    if args.scvi:
        counts = sctrilemma.data.load_example()
        scvi.model.SCVI.setup_anndata(counts)
        baseline = scvi.model.SCVI(counts)
        start = time.perf_counter()
        baseline.train(enable_progress_bar=False)
        results["scvi"] = {
            **scores(baseline.get_latent_representation(), cell_type, donor, depth),
            "train_s": time.perf_counter() - start,
        }

    pca = sctrilemma.data.load_example()
    sc.pp.normalize_total(pca, target_sum=1e4)
    sc.pp.log1p(pca)
    sc.pp.pca(pca, n_comps=50, random_state=0)
    results["pca_log1p_cp10k"] = scores(pca.obsm["X_pca"], cell_type, donor, depth)

    columns = ["nmi", "ari", "nmi_lowest_inertia", "bras", "depth_r2", "knn_accuracy", "train_s"]
    print(f"{'method':<20}" + "".join(f"{name:>20}" for name in columns))
    for name, row in results.items():
        print(f"{name:<20}" + "".join(f"{row.get(column, float('nan')):>20.3f}" for column in columns))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
