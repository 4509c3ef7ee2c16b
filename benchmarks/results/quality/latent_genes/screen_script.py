"""Train SCTrilemma as trilemma.py does (small preset plus overrides, 240 s) and score it alone with the Scorecard.

Run from the repository root::

    OMP_NUM_THREADS=1 python benchmarks/results/quality/latent_genes/screen_script.py DATA TAG MODEL_JSON SEEDS OUT
        [--cut-to-variable-genes N] [--plan PLAN_JSON]

``--cut-to-variable-genes`` trains on the data cut to the package's ``N`` most variable genes (a diagnostic: the
depth and logFC figures are then over those genes only).
"""

import argparse
import json
import os
import sys
from pathlib import Path

import anndata as ad
import torch

sys.path.insert(0, "benchmarks")
import trilemma

from sctrilemma.benchmark import Scorecard
from sctrilemma.model._gene_init import most_variable_genes

parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.add_argument("tag")
parser.add_argument("model", type=json.loads)
parser.add_argument("seeds", type=lambda s: [int(x) for x in s.split(",")])
parser.add_argument("out")
parser.add_argument("--cut-to-variable-genes", type=int, default=None)
parser.add_argument("--plan", type=json.loads, default=None, help="plan_kwargs over the preset's, as JSON")
args = parser.parse_args()
label_key, context_key, symbol_key = trilemma.DATASETS[args.data]
for seed in args.seeds:
    torch.set_num_threads(1)
    adata = ad.read_h5ad(Path("../shared/data") / args.data)
    adata.obs_names_make_unique()
    adata.obs[context_key] = adata.obs[context_key].astype(str)
    if args.cut_to_variable_genes is not None:
        adata = adata[:, most_variable_genes(adata.X, args.cut_to_variable_genes)].copy()
    model, budget = trilemma.train_sctrilemma(adata.copy(), context_key, 240.0, seed, args.model, args.plan)
    adata.obsm["X_sctrilemma"] = model.get_latent_representation()
    adata.layers["rec_sctrilemma"] = model.get_normalized_expression(library_size="observed", return_numpy=True)
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
    results = card.get_results()
    row = {"data": args.data, "tag": args.tag, "seed": seed, **budget, "load": os.getloadavg()[0]}
    for metric in trilemma.HEADLINE:
        value = results[(results.metric == metric) & (results.method == "X_sctrilemma")]
        if len(value):
            row[metric] = float(value["mean"].iloc[0])
    print(json.dumps(row), flush=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(row) + "\n")
