"""Crop diagnostic at several counts of Seurat-flavour variable genes: expressed genes in the crop, NMI/ARI, with the
crop by count and by variability. Usage (repository root): ``python .../hvg_count.py DATA.h5ad ...``."""

import sys
import warnings

import anndata as ad
import numpy as np
import scanpy as sc

sys.path.insert(0, "benchmarks/results/quality/zilionis_neutrophils")
from flavour_crop import CROP, crop_scores, thinned_to_common_depth

warnings.filterwarnings("ignore")
rng = np.random.default_rng(0)
for name in sys.argv[1:]:
    a, counts, lib, thinned, logn, y = thinned_to_common_depth(name, rng)
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
        s, _ = crop_scores(logn, sub, y)
        n_expr = ((thinned > 0) & mask[None, :]).sum(1)
        # rule B: the cell's expressed genes in order of variability
        prio = np.where(mask[None, :] & (thinned > 0), (disp.size - np.argsort(order))[None, :].astype(float), -1.0)
        sb, _ = crop_scores(logn, prio, y)
        print(
            f"{name[:12]} {n:6d} genes: expressed among them median {np.median(n_expr):.0f}, crop full in {np.mean(n_expr >= CROP):.0%}; NMI {s['nmi']:.3f} ARI {s['ari']:.3f}; by variability NMI {sb['nmi']:.3f} ARI {sb['ari']:.3f}",
            flush=True,
        )
