"""Scratch probe: Kang 2018 trained without a donor key (one prior group), scored with donor BRAS; preset vs gene hiding."""

import argparse
import json
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path

import scvi

sys.path.insert(0, "benchmarks")
sys.path.insert(0, str(Path(__file__).parent))
import trilemma
from screen_panel import headline_scores, labelled_data

from sctrilemma import SCTrilemma

warnings.filterwarnings("ignore")
p = argparse.ArgumentParser()
p.add_argument("--seeds", nargs="+", type=int)
p.add_argument("--model", default="{}")
p.add_argument("--tag", required=True)
args = p.parse_args()
name = "kang2018_pbmc_ctrl.h5ad"
label_key, context_key, symbol_key = trilemma.DATASETS[name]
for seed in args.seeds:
    a = labelled_data(name, context_key)
    scvi.settings.seed = seed
    work = a.copy()
    SCTrilemma.setup_anndata(work)
    model = SCTrilemma(work, preset="small", **json.loads(args.model))
    start = time.perf_counter()
    model.train(max_epochs=10_000, max_time=timedelta(seconds=240), enable_progress_bar=False)
    budget = {"train_s": time.perf_counter() - start, "steps": int(model.trainer.global_step)}
    scores = headline_scores(a, model, seed, label_key, context_key, symbol_key)
    print(json.dumps({"tag": args.tag, "data": name, "donor_key": None, "seed": seed, **budget, **scores}), flush=True)
