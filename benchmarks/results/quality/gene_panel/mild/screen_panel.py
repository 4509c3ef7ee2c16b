"""Scratch screen: SCTrilemma as trilemma.py trains it (240 s), scored by the Scorecard beside a PCA (no scVI).

``--model``, ``--plan`` and ``--train`` take SCTrilemma's model arguments, ``plan_kwargs`` and other ``train()``
arguments as JSON.
"""

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import anndata as ad
import torch

sys.path.insert(0, "benchmarks")
import trilemma

from sctrilemma.benchmark import Scorecard, pca_baseline

warnings.filterwarnings("ignore")


def labelled_data(name: str, context_key: str) -> ad.AnnData:
    """A shared labelled data set as trilemma.py reads it."""
    torch.set_num_threads(1)
    a = ad.read_h5ad(Path("../shared/data") / name)
    a.obs_names_make_unique()
    a.obs[context_key] = a.obs[context_key].astype(str)
    return a


def screen_arguments() -> argparse.ArgumentParser:
    """The options every screen takes: ``--data`` (file names in ../shared/data), ``--seeds`` and ``--out``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", nargs="+")
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument("--out", required=True, help="append each row to this JSON-lines file")
    return parser


def screen_runs(names: list[str], seeds: list[int]):
    """For each data set and seed: ``(name, seed, adata, (label_key, context_key, symbol_key), context_role)``."""
    for name in names:
        keys = trilemma.DATASETS[name]
        role = trilemma.default_context_role(name)
        for seed in seeds:
            yield name, seed, labelled_data(name, keys[1]), keys, role


def record_row(row: dict, out: str) -> None:
    """Print ``row`` and append it to the JSON-lines file ``out``."""
    print(json.dumps(row), flush=True)
    with open(out, "a") as handle:
        handle.write(json.dumps(row) + "\n")


def readout_scores(a: ad.AnnData, readouts: list[str], seed: int, label_key: str, context_key: str) -> dict:
    """NMI, ARI, BRAS and depth R² of each embedding ``a.obsm[readout]``, scored by one Scorecard on the same samples.

    Keys are the read-out's name without its ``X_`` and the metric's, e.g. ``pooled_nmi`` for ``X_pooled``.
    """
    torch.set_num_threads(1)
    card = Scorecard(a, readouts, label_key, context_key, n_repeats=5, seed=seed, progress_bar=False)
    card.benchmark()
    results = card.get_results()
    scores = {}
    for method in readouts:
        for metric in ("nmi", "ari", "bras", "depth_r2"):
            rows = results[(results["method"] == method) & (results["metric"] == metric)]
            scores[f"{method[2:]}_{metric}"] = round(float(rows["mean"].iloc[0]), 4)
    return scores


def headline_scores(a: ad.AnnData, model, seed: int, label_key: str, context_key: str, symbol_key) -> dict:
    """The trained model's headline Scorecard figures on ``a``, scored beside a PCA as trilemma.py scores them."""
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
    out = {"load": os.getloadavg()[0]}
    for m in trilemma.HEADLINE:
        rows = r[r["metric"] == m]
        if len(rows):
            out[m] = round(float(rows["mean"].iloc[0]), 4)
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--data", nargs="+")
    p.add_argument("--seeds", nargs="+", type=int)
    p.add_argument("--model", default="{}")
    p.add_argument("--plan", default="{}", help="plan_kwargs, as JSON")
    p.add_argument("--train", default="{}", help="other train() arguments, as JSON (e.g. early_stopping)")
    p.add_argument("--tag", required=True)
    args = p.parse_args()
    kw = json.loads(args.model)
    plan = json.loads(args.plan) or None
    train_kwargs = json.loads(args.train)
    for name, seed, a, keys, role in screen_runs(args.data, args.seeds):
        model, budget = trilemma.train_sctrilemma(a.copy(), keys[1], 240.0, seed, kw, plan, role, train_kwargs)
        scores = headline_scores(a, model, seed, *keys)
        print(json.dumps({"tag": args.tag, "data": name, "seed": seed, **budget, **scores}), flush=True)
