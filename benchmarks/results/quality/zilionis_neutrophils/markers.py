"""Scratch: Zilionis's NK-against-T marker genes (Wilcoxon on log1p-CP10K), their rank among the Seurat-flavour
variable genes that the encoder reads (its first 4,000), and their counts at the common embedding depth."""

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
sc.tl.rank_genes_groups(b, "cell_type", groups=["NK cells"], reference="T cells", method="wilcoxon")
nk = sc.get.rank_genes_groups_df(b, "NK cells").head(15)
sc.tl.rank_genes_groups(b, "cell_type", groups=["T cells"], reference="NK cells", method="wilcoxon")
t = sc.get.rank_genes_groups_df(b, "T cells").head(15)
h = sc.pp.highly_variable_genes(b, n_top_genes=4000, inplace=False)
rank = pd.Series(np.argsort(np.argsort(-h["dispersions_norm"].fillna(-1e9).values)), index=a.var_names)
X = a.X.toarray() if hasattr(a.X, "toarray") else a.X
lib = X.sum(1)
for name, df in (("NK>T", nk), ("T>NK", t)):
    print(name)
    for g in df.names:
        i = a.var_names.get_loc(g)
        grp = "NK cells" if name == "NK>T" else "T cells"
        cells = (a.obs.cell_type == grp).values
        mean_counts = X[cells, i].mean()
        share = (X[cells, i] / lib[cells]).mean() * 1001
        print(
            f"  {g:10s} logFC {df.set_index('names').loc[g, 'logfoldchanges']:.1f} HVG rank {rank[g]:5d} mean counts {mean_counts:.2f} at 1,001 counts {share:.2f}"
        )
