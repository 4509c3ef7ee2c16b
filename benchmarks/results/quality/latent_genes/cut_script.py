"""Data cut to the 4,000 most variable genes (as the package picks them), then trained and scored like screen.py."""

import json
import os
import sys
from pathlib import Path

import anndata as ad
import torch

sys.path.insert(0, "benchmarks")  # run from the repository root
import trilemma

from sctrilemma.benchmark import Scorecard
from sctrilemma.model._gene_init import most_variable_genes

data, seeds, out = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], sys.argv[3]
label_key, context_key, symbol_key = trilemma.DATASETS[data]
for seed in seeds:
    torch.set_num_threads(1)
    adata = ad.read_h5ad(Path("../shared/data") / data)
    adata.obs_names_make_unique()
    adata.obs[context_key] = adata.obs[context_key].astype(str)
    mask = most_variable_genes(adata.X, 4000)
    cut = adata[:, mask].copy()
    model, b = trilemma.train_sctrilemma(cut.copy(), context_key, 240.0, seed, {}, None)
    cut.obsm["X_sctrilemma"] = model.get_latent_representation()
    cut.layers["rec_sctrilemma"] = model.get_normalized_expression(library_size="observed", return_numpy=True)
    card = Scorecard(
        cut,
        ["X_sctrilemma"],
        label_key,
        context_key,
        reconstruction_keys={"X_sctrilemma": "rec_sctrilemma"},
        gene_sets={},
        symbol_key=symbol_key,
        n_repeats=5,
        seed=seed,
        progress_bar=False,
    )
    card.benchmark()
    res = card.get_results()
    row = {"data": data, "tag": "cut4000", "seed": seed, **b, "load": os.getloadavg()[0]}
    for m in trilemma.HEADLINE:
        r = res[(res.metric == m) & (res.method == "X_sctrilemma")]
        if len(r):
            row[m] = float(r["mean"].iloc[0])
    print(json.dumps(row), flush=True)
    open(out, "a").write(json.dumps(row) + "\n")
