"""Train SCTrilemma as trilemma.py does (small preset + overrides, 240 s) and score it alone with the Scorecard."""

import json
import os
import sys
from pathlib import Path

import anndata as ad
import torch

sys.path.insert(0, "benchmarks")  # run from the repository root
import trilemma

from sctrilemma.benchmark import Scorecard

data, tag, model_kwargs, seeds, out = (
    sys.argv[1],
    sys.argv[2],
    json.loads(sys.argv[3]),
    [int(s) for s in sys.argv[4].split(",")],
    sys.argv[5],
)
plan_kwargs = json.loads(sys.argv[6]) if len(sys.argv) > 6 else None
label_key, context_key, symbol_key = trilemma.DATASETS[data]
for seed in seeds:
    torch.set_num_threads(1)
    adata = ad.read_h5ad(Path("../shared/data") / data)
    adata.obs_names_make_unique()
    adata.obs[context_key] = adata.obs[context_key].astype(str)
    model, b = trilemma.train_sctrilemma(adata.copy(), context_key, 240.0, seed, model_kwargs, plan_kwargs)
    adata.obsm["X_sctrilemma"] = model.get_latent_representation()
    adata.layers["rec_sctrilemma"] = model.get_normalized_expression(
        gene_list=list(adata.var_names), library_size="observed", return_numpy=True
    )
    card = Scorecard(
        adata,
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
    row = {"data": data, "tag": tag, "seed": seed, **b, "load": os.getloadavg()[0]}
    for m in trilemma.HEADLINE:
        r = res[(res.metric == m) & (res.method == "X_sctrilemma")]
        if len(r):
            row[m] = float(r["mean"].iloc[0])
    print(json.dumps(row), flush=True)
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")
