"""Embedding quality of SCTrilemma (small preset) on the shipped example, next to a log1p-CP10K PCA.

Prints cell-type kNN accuracy (5-fold), cell-type and donor silhouettes (cosine) and training time.
Usage: ``python benchmarks/example_quality.py [--quick] [--max-epochs N] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

import scanpy as sc
import scvi
from sklearn.metrics import silhouette_score
from sklearn.model_selection import cross_val_score
from sklearn.neighbors import KNeighborsClassifier

import sctrilemma

if TYPE_CHECKING:
    import numpy as np


def scores(embedding: np.ndarray, cell_type: np.ndarray, donor: np.ndarray) -> dict[str, float]:
    knn = KNeighborsClassifier(n_neighbors=15, metric="cosine")
    return {
        "knn_accuracy": float(cross_val_score(knn, embedding, cell_type, cv=5).mean()),
        "cell_type_silhouette": float(silhouette_score(embedding, cell_type, metric="cosine")),
        "donor_silhouette": float(silhouette_score(embedding, donor, metric="cosine")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 epochs instead of --max-epochs")
    parser.add_argument("--max-epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default: the model's)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    scvi.settings.seed = 0
    adata = sctrilemma.data.load_example()
    cell_type, donor = adata.obs["cell_type"].to_numpy(), adata.obs["donor"].to_numpy()
    results: dict[str, dict[str, float]] = {}

    sctrilemma.SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = sctrilemma.SCTrilemma(adata, preset="small")
    start = time.perf_counter()
    plan_kwargs = {} if args.lr is None else {"lr": args.lr}
    model.train(max_epochs=2 if args.quick else args.max_epochs, enable_progress_bar=False, plan_kwargs=plan_kwargs)
    train_seconds = time.perf_counter() - start
    results["sctrilemma_small"] = {
        **scores(model.get_latent_representation(), cell_type, donor),
        "train_s": train_seconds,
    }

    pca = sctrilemma.data.load_example()
    sc.pp.normalize_total(pca, target_sum=1e4)
    sc.pp.log1p(pca)
    sc.pp.pca(pca, n_comps=50, random_state=0)
    results["pca_log1p_cp10k"] = scores(pca.obsm["X_pca"], cell_type, donor)

    header = f"{'method':<20}{'kNN acc':>10}{'type sil':>10}{'donor sil':>11}{'train s':>9}"
    print(header)
    for name, row in results.items():
        print(
            f"{name:<20}{row['knn_accuracy']:>10.3f}{row['cell_type_silhouette']:>10.3f}"
            f"{row['donor_silhouette']:>11.3f}{row.get('train_s', float('nan')):>9.1f}"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
