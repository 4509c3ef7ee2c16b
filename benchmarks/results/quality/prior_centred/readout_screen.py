"""Four read-outs of the same trained models: ``r``, ``r - mu``, ``(r - mu) / sigma`` and ``r`` minus its group's mean.

``r`` is the pooled posterior mean, ``mu`` and ``sigma`` the PB-Cond prior's mean and SD of the cell's group. Trains as
``trilemma.py`` does (small preset, 240 s) and scores with the Scorecard. Run from the repository root::

    OMP_NUM_THREADS=1 python benchmarks/results/quality/prior_centred/readout_screen.py DATA SEEDS OUT
"""

import argparse
import json
import os
import sys
from pathlib import Path

import anndata as ad
import numpy as np
import torch

sys.path.insert(0, "benchmarks")
import trilemma

from sctrilemma.benchmark import Scorecard

parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.add_argument("seeds", type=lambda s: [int(x) for x in s.split(",")])
parser.add_argument("out")
args = parser.parse_args()
label_key, context_key, symbol_key = trilemma.DATASETS[args.data]
for seed in args.seeds:
    torch.set_num_threads(1)
    adata = ad.read_h5ad(Path("../shared/data") / args.data)
    adata.obs_names_make_unique()
    adata.obs[context_key] = adata.obs[context_key].astype(str)
    model, budget = trilemma.train_sctrilemma(adata.copy(), context_key, 240.0, seed, {}, None)
    model.module.embedding_centred_on_prior = False  # r itself (the read-out the model reported at 92725db)
    r = model.get_latent_representation()
    model._prepare_prior(model.adata)
    means, logvars = [], []
    with torch.no_grad():
        for tensors in model._make_data_loader(adata=model.adata, batch_size=512):
            mean, logvar = model.module.prior_parameters(tensors)
            means.append(mean.reshape(mean.shape[0], -1).numpy())
            logvars.append(logvar.reshape(logvar.shape[0], -1).numpy())
    mu, logvar = np.concatenate(means), np.concatenate(logvars)
    group_centred = r.copy()
    for group in adata.obs[context_key].unique():
        cells = (adata.obs[context_key] == group).to_numpy()
        group_centred[cells] -= group_centred[cells].mean(0)
    adata.obsm["X_raw"], adata.obsm["X_centred"] = r, r - mu
    adata.obsm["X_standard"], adata.obsm["X_ctxmean"] = (r - mu) / np.exp(0.5 * logvar), group_centred
    keys = ["X_raw", "X_centred", "X_standard", "X_ctxmean"]
    card = Scorecard(
        adata, keys, label_key, context_key, gene_sets={}, symbol_key=symbol_key, n_repeats=5, seed=seed,
        progress_bar=False,
    )  # fmt: skip
    card.benchmark()
    results = card.get_results()
    for key in keys:
        row = {"data": args.data, "tag": key, "seed": seed, **budget, "load": os.getloadavg()[0]}
        row["prior_mean_spread"] = float(np.linalg.norm(mu - mu.mean(0), axis=1).mean())
        row["z_spread"] = float(np.linalg.norm(r - r.mean(0), axis=1).mean())
        for metric in trilemma.HEADLINE:
            value = results[(results.metric == metric) & (results.method == key)]
            if len(value):
                row[metric] = float(value["mean"].iloc[0])
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
