"""Crop diagnostic: each cell thinned to the 10th-percentile depth, its top-256 genes by count among 4,000 variable
genes (by flavour) kept as log1p-CP10K, PCA 50, k-means (20 single starts) NMI / ARI."""

import sys
import warnings

import anndata as ad
import numpy as np
import scanpy as sc
import scipy.sparse as sp
from sklearn.decomposition import PCA

from sctrilemma import metrics

warnings.filterwarnings("ignore")

CROP = 256


def thinned_to_common_depth(name: str, rng: np.random.Generator):
    """A shared data set's dense counts, thinned to its cells' 10th-percentile depth, and their log1p-CP10K:
    ``(adata, counts, library, thinned, log_thinned, labels)``."""
    a = ad.read_h5ad(f"../shared/data/{name}")
    counts = a.X.toarray().astype(np.float64) if sp.issparse(a.X) else np.asarray(a.X, dtype=np.float64)
    lib = counts.sum(1)
    target = np.quantile(lib, 0.1)
    thinned = rng.binomial(counts.astype(np.int64), np.minimum(1.0, target / lib)[:, None]).astype(np.float64)
    logn = np.log1p(thinned / np.maximum(thinned.sum(1, keepdims=True), 1) * 1e4)
    return a, counts, lib, thinned, logn, a.obs.cell_type.astype(str).values


def crop_scores(logn: np.ndarray, priority: np.ndarray, y: np.ndarray) -> tuple[dict, np.ndarray]:
    """k-means NMI/ARI of a 50-component PCA of each cell's ``CROP`` highest-``priority`` genes (those above 0 kept
    as ``logn``, zero elsewhere), and the kept values ``(cells, CROP)``."""
    top = np.argsort(-priority, axis=1, kind="stable")[:, :CROP]
    vals = np.take_along_axis(logn, top, axis=1) * (np.take_along_axis(priority, top, axis=1) > 0)
    kept = np.zeros_like(logn)
    np.put_along_axis(kept, top, vals, axis=1)
    return metrics.nmi_ari_kmeans(PCA(50, random_state=0).fit_transform(kept), y), vals


def main() -> None:
    rng = np.random.default_rng(0)
    for name in sys.argv[1:]:
        a, counts, lib, thinned, logn, y = thinned_to_common_depth(name, rng)
        masks = {"all genes": np.ones(a.n_vars, bool)}
        b = ad.AnnData(np.log1p(counts / lib[:, None] * 1e4))
        b.var_names = a.var_names
        masks["seurat (shipped)"] = sc.pp.highly_variable_genes(b, n_top_genes=4000, flavor="seurat", inplace=False)[
            "highly_variable"
        ].values
        masks["cell_ranger"] = sc.pp.highly_variable_genes(b, n_top_genes=4000, flavor="cell_ranger", inplace=False)[
            "highly_variable"
        ].values
        seen = (counts > 0).sum(0) >= 3
        c = ad.AnnData(counts[:, seen].astype(np.float32))
        for flavour in ("seurat_v3", "pearson_residuals"):
            try:
                if flavour == "seurat_v3":
                    hv = sc.pp.highly_variable_genes(c.copy(), n_top_genes=4000, flavor="seurat_v3", inplace=False)[
                        "highly_variable"
                    ].values
                else:
                    hv = sc.experimental.pp.highly_variable_genes(
                        c.copy(), n_top_genes=4000, flavor="pearson_residuals", inplace=False
                    )["highly_variable"].values
                m = np.zeros(a.n_vars, bool)
                m[np.flatnonzero(seen)[hv]] = True
                masks[flavour] = m
            except ValueError as e:
                print(name, flavour, "failed:", str(e)[:80])
        masks["seurat, then other genes"] = ("fill", masks["seurat (shipped)"])
        if a.n_vars <= 4000:
            masks = {"all genes": masks["all genes"]}
        for flavour, mask in masks.items():
            if isinstance(mask, tuple):
                mask = mask[1]
                sub = np.where(thinned > 0, thinned + 1e6 * mask[None, :], -1)
            else:
                sub = np.where(mask[None, :], thinned, -1)
            s, vals = crop_scores(logn, sub, y)
            extra = f" mean genes in crop {(vals > 0).sum(1).mean():.0f}"
            if "zilionis" in name:
                extra += " NK markers kept: " + ",".join(
                    g
                    for g in ["NKG7", "KLRB1C", "TYROBP", "FCER1G", "KLRD1", "KLRK1", "CCL5", "GZMA"]
                    if mask[a.var_names.get_loc(g)]
                )
            print(f"{name[:12]} {flavour:20s} NMI {s['nmi']:.3f} ARI {s['ari']:.3f}{extra}", flush=True)


if __name__ == "__main__":
    main()
