"""Scratch: ranks of Zilionis T and NK lineage markers among the Seurat-flavour variable genes, and their counts at the
common embedding depth."""

import warnings

import anndata as ad
import numpy as np
import pandas as pd
import scanpy as sc

warnings.filterwarnings("ignore")
a = ad.read_h5ad("../shared/data/zilionis2019_mouse_lung_cluey.h5ad")
b = a.copy()
sc.pp.normalize_total(b, 1e4)
sc.pp.log1p(b)
h = sc.pp.highly_variable_genes(b, n_top_genes=4000, inplace=False)
rank = pd.Series(np.argsort(np.argsort(-h["dispersions_norm"].fillna(-1e9).values)), index=a.var_names)
X = a.X.toarray()
lib = X.sum(1)
y = a.obs.cell_type.astype(str).values
for g in [
    "CD3E",
    "CD3G",
    "CD3D",
    "TRBC2",
    "TRAC",
    "CD8B1",
    "CD4",
    "LEF1",
    "TCF7",
    "IL7R",
    "CD2",
    "CD5",
    "CD6",
    "THY1",
    "CD28",
    "NCR1",
    "PRF1",
    "KLRA4",
    "KLRA8",
]:
    if g not in a.var_names:
        print(g, "absent")
        continue
    i = a.var_names.get_loc(g)
    m = {t: (X[y == t, i] / lib[y == t]).mean() * 1001 for t in ["T cells", "NK cells"]}
    print(f"{g:7s} HVG rank {rank[g]:5d}  counts at 1,001: T {m['T cells']:.2f} NK {m['NK cells']:.2f}")
