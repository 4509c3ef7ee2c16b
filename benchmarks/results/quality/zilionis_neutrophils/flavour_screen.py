"""Zilionis: the shipped encoder genes (Seurat flavour) against Pearson-residual variable genes, trained at 240 s."""

import json
import sys
import warnings

import anndata as ad
import numpy as np
import scanpy as sc
import torch

sys.path.insert(0, "benchmarks")
import trilemma

from sctrilemma import metrics
from sctrilemma.model import _gene_init

warnings.filterwarnings("ignore")

SHIPPED = _gene_init.most_variable_genes


def pearson(counts, n_genes, *, max_cells=_gene_init.MAX_PCA_CELLS, seed=0):
    x = counts.toarray() if hasattr(counts, "toarray") else np.asarray(counts)
    seen = (x > 0).sum(0) >= 3
    c = ad.AnnData(x[:, seen].astype(np.float32))
    hv = sc.experimental.pp.highly_variable_genes(c, n_top_genes=n_genes, flavor="pearson_residuals", inplace=False)[
        "highly_variable"
    ].values
    m = np.zeros(x.shape[1], bool)
    m[np.flatnonzero(seen)[hv]] = True
    return m


name, arm, out = sys.argv[1], sys.argv[2], sys.argv[3]
seeds = [int(s) for s in sys.argv[4:]]
label, context, _ = trilemma.DATASETS[name]
role = trilemma.default_context_role(name)
a = ad.read_h5ad(f"../shared/data/{name}")
a.obs_names_make_unique()
a.obs[context] = a.obs[context].astype(str)
for seed in seeds:
    _gene_init.most_variable_genes = pearson if arm == "pearson" else SHIPPED
    torch.set_num_threads(1)
    model, b = trilemma.train_sctrilemma(a.copy(), context, 240.0, seed, context_role=role)
    z = model.get_latent_representation()
    np.save(f"{out}/{name[:8]}_{arm}_seed{seed}.npy", z)
    s = metrics.nmi_ari_kmeans(z, a.obs[label].astype(str).values)
    row = {"data": name, "arm": arm, "seed": seed, **b, **{k: round(v, 4) for k, v in s.items()}}
    print(json.dumps(row), flush=True)
    with open(f"{out}/flavour_screen.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
