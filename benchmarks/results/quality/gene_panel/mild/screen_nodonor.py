"""Scratch probe: Kang 2018 trained without a donor key (one prior group), scored with donor BRAS; preset vs gene hiding."""

import argparse
import json
import os
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path

import anndata as ad
import scvi
import torch

sys.path.insert(0, "benchmarks")
import trilemma

from sctrilemma import SCTrilemma
from sctrilemma.benchmark import Scorecard, pca_baseline

warnings.filterwarnings("ignore")
p = argparse.ArgumentParser()
p.add_argument("--seeds", nargs="+", type=int)
p.add_argument("--model", default="{}")
p.add_argument("--tag", required=True)
args = p.parse_args()
name = "kang2018_pbmc_ctrl.h5ad"
label_key, context_key, symbol_key = trilemma.DATASETS[name]
for seed in args.seeds:
    torch.set_num_threads(1)
    a = ad.read_h5ad(Path("../shared/data") / name)
    a.obs_names_make_unique()
    a.obs[context_key] = a.obs[context_key].astype(str)
    scvi.settings.seed = seed
    work = a.copy()
    SCTrilemma.setup_anndata(work)
    model = SCTrilemma(work, preset="small", **json.loads(args.model))
    start = time.perf_counter()
    model.train(max_epochs=10_000, max_time=timedelta(seconds=240), enable_progress_bar=False)
    budget = {"train_s": time.perf_counter() - start, "steps": int(model.trainer.global_step)}
    a.obsm["X_sctrilemma"] = model.get_latent_representation()
    a.layers["rec_sctrilemma"] = model.get_normalized_expression(
        gene_list=list(a.var_names), library_size="observed", return_numpy=True
    )
    a.obsm["X_pca"] = pca_baseline(a, seed=seed).embedding
    torch.set_num_threads(1)
    card = Scorecard(
        a,
        ["X_sctrilemma", "X_pca"],
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
    r = card.get_results()
    r = r[r["method"] == "X_sctrilemma"]
    out = {"tag": args.tag, "data": name, "donor_key": None, "seed": seed, **budget, "load": os.getloadavg()[0]}
    for m in trilemma.HEADLINE:
        rows = r[r["metric"] == m]
        if len(rows):
            out[m] = round(float(rows["mean"].iloc[0]), 4)
    print(json.dumps(out), flush=True)
