"""Crop diagnostic at several counts of Seurat-flavour variable genes: expressed genes in the crop, NMI/ARI."""

import sys
import warnings

import anndata as ad
import numpy as np
import scanpy as sc
import scipy.sparse as sp
from sklearn.decomposition import PCA

from sctrilemma import metrics

warnings.filterwarnings("ignore")
rng = np.random.default_rng(0)
for name in sys.argv[1:]:
    a = ad.read_h5ad(f"../shared/data/{name}")
    counts = a.X.toarray().astype(np.float64) if sp.issparse(a.X) else np.asarray(a.X, dtype=np.float64)
    lib = counts.sum(1)
    target = np.quantile(lib, 0.1)
    thinned = rng.binomial(counts.astype(np.int64), np.minimum(1.0, target / lib)[:, None]).astype(np.float64)
    logn = np.log1p(thinned / np.maximum(thinned.sum(1, keepdims=True), 1) * 1e4)
    y = a.obs.cell_type.astype(str).values
    b = ad.AnnData(np.log1p(counts / lib[:, None] * 1e4))
    disp = (
        sc.pp.highly_variable_genes(b, n_top_genes=4000, flavor="seurat", inplace=False)["dispersions_norm"]
        .fillna(-1e9)
        .values
    )
    order = np.argsort(-disp, kind="stable")
    for n in (4000, 8000, 24000):
        mask = np.zeros(a.n_vars, bool)
        mask[order[:n]] = True
        sub = np.where(mask[None, :], thinned, -1)
        top = np.argsort(-sub, axis=1, kind="stable")[:, :256]
        vals = np.take_along_axis(logn, top, axis=1) * (np.take_along_axis(sub, top, axis=1) > 0)
        kept = np.zeros_like(logn)
        np.put_along_axis(kept, top, vals, axis=1)
        z = PCA(50, random_state=0).fit_transform(kept)
        s = metrics.nmi_ari_kmeans(z, y)
        n_expr = ((thinned > 0) & mask[None, :]).sum(1)
        # rule B: the cell's expressed genes in order of variability
        prio = np.where(mask[None, :] & (thinned > 0), (disp.size - np.argsort(order))[None, :].astype(float), -1.0)
        topb = np.argsort(-prio, axis=1, kind="stable")[:, :256]
        valsb = np.take_along_axis(logn, topb, axis=1) * (np.take_along_axis(prio, topb, axis=1) > 0)
        keptb = np.zeros_like(logn)
        np.put_along_axis(keptb, topb, valsb, axis=1)
        sb = metrics.nmi_ari_kmeans(PCA(50, random_state=0).fit_transform(keptb), y)
        print(
            f"{name[:12]} {n:6d} genes: expressed among them median {np.median(n_expr):.0f}, crop full in {np.mean(n_expr >= 256):.0%}; NMI {s['nmi']:.3f} ARI {s['ari']:.3f}; by variability NMI {sb['nmi']:.3f} ARI {sb['ari']:.3f}",
            flush=True,
        )
