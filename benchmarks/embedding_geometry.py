"""How the embedding's geometry changes with training, on the shipped example (3,000 Kang 2018 control PBMCs).

``--data`` takes another ``.h5ad`` with raw counts and ``cell_type``, ``donor`` and ``gene_symbol`` columns
(for example ``../shared/data/kang2018_pbmc_ctrl.h5ad``).

Trains one model (SCTrilemma's small preset, or scVI with scvi-tools' defaults) and, at the end of the epochs given
by ``--at``, embeds all its cells and scores:

- k-means NMI (``metrics.nmi_ari_kmeans``: k = the number of cell types, 20 single starts averaged), the NMI of the
  lowest-inertia start of those 20, and 15-NN cell-type accuracy (5-fold);
- ``eta2``: the share of the embedding's variance that lies between the cell types' centroids, with the absolute
  ``between`` and ``within`` variances and the participation ratio ``pr`` (effective number of dimensions);
- ``separation``: the smallest distance between two cell types' centroids over the mean class radius;
- ``ribo_r2_within`` and ``depth_r2_within``: how well a linear map of the embedding predicts each cell's
  ribosomal-protein share of counts and its log depth *within* its cell type (class means removed, 5-fold R²).

SCTrilemma trains with early stopping off, so that every run reaches its last epoch. ``--drop-ribosomal`` removes
the ribosomal-protein genes (``RPS``/``RPL`` symbols) before training; the shares and depths are still those of all
genes. Usage::

    OMP_NUM_THREADS=1 python benchmarks/embedding_geometry.py --model '{"gene_embedding_init": "pca"}' --json a.json
    OMP_NUM_THREADS=1 python benchmarks/embedding_geometry.py --method scvi --epochs 120 --at 5 20 40 120
"""

from __future__ import annotations

import argparse
import json

import anndata
import numpy as np
import scipy.sparse
import scvi
import torch
from example_quality import knn_accuracy, lowest_inertia_nmi
from lightning.pytorch.callbacks import Callback
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import cross_val_score

import sctrilemma
from sctrilemma import metrics


def within_class_r2(embedding: np.ndarray, target: np.ndarray, cell_type: np.ndarray) -> float:
    """5-fold R² of ``target`` from ``embedding``, both centred within each cell type."""
    x, y = embedding.astype(np.float64), target.astype(np.float64)
    for label in np.unique(cell_type):
        rows = cell_type == label
        x[rows] -= x[rows].mean(0)
        y[rows] -= y[rows].mean()
    return float(cross_val_score(LinearRegression(), x, y, cv=5, scoring="r2").mean())


def geometry(embedding: np.ndarray, cell_type: np.ndarray) -> dict[str, float]:
    """Between- and within-type variance, their ratio, the participation ratio and the centroid separation."""
    x = embedding - embedding.mean(0)
    labels = np.unique(cell_type)
    centroids = np.stack([x[cell_type == label].mean(0) for label in labels])
    sizes = np.array([(cell_type == label).sum() for label in labels])
    between = float((sizes * np.square(centroids).sum(1)).sum() / len(x))
    total = float(np.square(x).sum(1).mean())
    radius = np.array(
        [np.linalg.norm(x[cell_type == label] - centroids[i], axis=1).mean() for i, label in enumerate(labels)]
    )
    distances = np.linalg.norm(centroids[:, None] - centroids[None], axis=-1)
    eigenvalues = np.linalg.eigvalsh(np.cov(x.T))
    return {
        "eta2": between / total,
        "between": between,
        "within": total - between,
        "pr": float(eigenvalues.sum() ** 2 / np.square(eigenvalues).sum()),
        "separation": float(distances[~np.eye(len(labels), dtype=bool)].min() / radius.mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", choices=["sctrilemma", "scvi"], default="sctrilemma")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--at", type=int, nargs="+", default=[2, 4, 6, 8, 10, 12, 14, 16, 18, 20])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="{}", help="SCTrilemma keyword arguments, as JSON")
    parser.add_argument("--plan", default="{}", help="SCTrilemma's plan_kwargs, as JSON")
    parser.add_argument("--drop-ribosomal", action="store_true")
    parser.add_argument("--data", default=None, help="an .h5ad in place of the shipped example")
    parser.add_argument("--quick", action="store_true", help="2 epochs, scored after each")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.quick:
        args.epochs, args.at = 2, [1, 2]
    torch.set_num_threads(1)
    scvi.settings.seed = args.seed
    adata = sctrilemma.data.load_example() if args.data is None else anndata.read_h5ad(args.data)
    cell_type = adata.obs["cell_type"].to_numpy()
    counts = scipy.sparse.csr_matrix(adata.X)
    depth = np.asarray(counts.sum(1)).ravel()
    ribosomal = adata.var["gene_symbol"].astype(str).str.match(r"^RP[SL]\d").to_numpy()
    ribo_share = np.asarray(counts[:, ribosomal].sum(1)).ravel() / depth
    if args.drop_ribosomal:
        adata = adata[:, ~ribosomal].copy()
    if args.method == "scvi":
        scvi.model.SCVI.setup_anndata(adata)
        model = scvi.model.SCVI(adata)
    else:
        sctrilemma.SCTrilemma.setup_anndata(adata, donor_key="donor")
        model = sctrilemma.SCTrilemma(adata, preset="small", **json.loads(args.model))
    rows: list[dict[str, float]] = []

    class Score(Callback):
        def on_train_epoch_end(self, trainer, pl_module) -> None:
            epoch = trainer.current_epoch + 1
            if epoch not in args.at:
                return
            trained = model.is_trained_
            model.is_trained_ = True  # scVI refuses to embed before training ends
            embedding = model.get_latent_representation()
            model.is_trained_ = trained
            model.module.train()
            row = {
                "epoch": epoch,
                "nmi": metrics.nmi_ari_kmeans(embedding, cell_type)["nmi"],
                "nmi_lowest_inertia": lowest_inertia_nmi(embedding, cell_type),
                "knn_accuracy": knn_accuracy(embedding, cell_type),
                **geometry(embedding, cell_type),
                "ribo_r2_within": within_class_r2(embedding, ribo_share, cell_type),
                "depth_r2_within": within_class_r2(embedding, np.log(depth), cell_type),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)

    train_kwargs = {"max_epochs": args.epochs, "callbacks": [Score()], "enable_progress_bar": False}
    if args.method == "sctrilemma":
        train_kwargs.update(early_stopping=False, plan_kwargs=json.loads(args.plan))
    model.train(**train_kwargs)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
