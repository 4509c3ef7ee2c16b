"""How much cell identity the encoder's crop holds: k-means NMI of a PCA of each cell's top-expressed genes only.

For each crop size, every cell keeps the log1p-CP10K values of its top ``crop`` genes by count (the embedding crop)
and zeros elsewhere; a 50-component PCA of that matrix is clustered with k-means (``metrics.nmi_ari_kmeans``, 5
initialisations) and compared with the same on all genes. A diagnostic behind ``results/quality/NOTES.md``: if the
crop clusters well, a model that embeds badly from it is not short of input.

Usage: ``python benchmarks/crop_information.py [--data cellbench_lung_celllines.h5ad] [--crops 128 256 512 1024]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anndata as ad
import numpy as np
from sklearn.decomposition import PCA

from sctrilemma import metrics


def cropped(log_values: np.ndarray, counts: np.ndarray, crop: int) -> np.ndarray:
    """``log_values`` kept on each cell's top-``crop`` genes by count (ties in gene order), zero elsewhere."""
    top = np.argsort(-counts, axis=1, kind="stable")[:, :crop]
    kept = np.zeros_like(log_values)
    np.put_along_axis(kept, top, np.take_along_axis(log_values, top, axis=1), axis=1)
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--data", default="cellbench_lung_celllines.h5ad")
    parser.add_argument("--crops", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--n-cells", type=int, default=2000)
    args = parser.parse_args()
    adata = ad.read_h5ad(Path(args.data_dir) / args.data)
    cells = np.sort(np.random.default_rng(0).choice(adata.n_obs, min(args.n_cells, adata.n_obs), replace=False))
    counts = adata.X[cells].toarray().astype(np.float32)
    log_values = np.log1p(1e4 * counts / counts.sum(1, keepdims=True))
    labels = adata.obs["cell_type"].to_numpy()[cells]
    for crop in [*args.crops, None]:
        matrix = log_values if crop is None else cropped(log_values, counts, crop)
        scores = metrics.nmi_ari_kmeans(PCA(50, random_state=0).fit_transform(matrix), labels, n_init=5)
        print(f"{args.data} crop {'all genes' if crop is None else crop}: k-means NMI {scores['nmi']:.3f}")


if __name__ == "__main__":
    main()
