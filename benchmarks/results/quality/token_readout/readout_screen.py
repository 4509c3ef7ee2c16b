"""The same trained model read out two ways: its pooled embedding (the tokens' mean, as shipped) and a 50-component PCA
of its K token means side by side, fitted on the training cells. Evaluation only: one model per data set and seed,
both read-outs scored by the Scorecard (identity, context mixing, depth; no reconstruction) on the same samples.

Usage (from the repository root; one data set per one-thread process)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/results/quality/token_readout/readout_screen.py \
        --data kang2018_pbmc_ctrl.h5ad --seeds 0 1
"""

import argparse
import json
import os
import sys
import warnings

import numpy as np
import torch
from sklearn.decomposition import PCA

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import labelled_data

from sctrilemma.benchmark import Scorecard

warnings.filterwarnings("ignore")
parser = argparse.ArgumentParser()
parser.add_argument("--data", nargs="+")
parser.add_argument("--seeds", nargs="+", type=int)
args = parser.parse_args()
for name in args.data:
    label_key, context_key, _ = trilemma.DATASETS[name]
    for seed in args.seeds:
        adata = labelled_data(name, context_key)
        role = trilemma.default_context_role(name)
        model, budget = trilemma.train_sctrilemma(adata.copy(), context_key, 240.0, seed, None, None, role)
        adata.obsm["X_pooled"] = model.get_latent_representation()
        tokens = np.asarray(model.get_latent_tokens())
        adata.obsm["X_tokens_pca"] = PCA(50, random_state=0).fit_transform(tokens.reshape(tokens.shape[0], -1))
        torch.set_num_threads(1)
        card = Scorecard(
            adata, ["X_pooled", "X_tokens_pca"], label_key, context_key, n_repeats=5, seed=seed, progress_bar=False
        )
        card.benchmark()
        results = card.get_results()
        row = {"data": name, "seed": seed, **budget, "load": os.getloadavg()[0]}
        for method in ("X_pooled", "X_tokens_pca"):
            for metric in ("nmi", "ari", "bras", "depth_r2"):
                rows = results[(results["method"] == method) & (results["metric"] == metric)]
                row[f"{method[2:]}_{metric}"] = round(float(rows["mean"].iloc[0]), 4)
        print(json.dumps(row), flush=True)
