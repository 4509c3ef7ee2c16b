"""Scratch screen: SCTrilemma as trilemma.py trains it (240 s budget), k-means NMI/ARI only; --cooldown N epochs."""

import argparse
import json
import sys
import warnings
from pathlib import Path

import anndata as ad
import torch

sys.path.insert(0, "benchmarks")
import trilemma

from sctrilemma.metrics import nmi_ari_kmeans
from sctrilemma.model import _presets

warnings.filterwarnings("ignore")
p = argparse.ArgumentParser()
p.add_argument("--data", nargs="+")
p.add_argument("--seeds", nargs="+", type=int)
p.add_argument("--cooldown", type=int)
args = p.parse_args()
_presets.EARLY_STOPPING_COOLDOWN["small"] = args.cooldown
for name in args.data:
    label_key, context_key, _ = trilemma.DATASETS[name]
    role = trilemma.CONTEXT_ROLES.get(name, "donor")
    for seed in args.seeds:
        torch.set_num_threads(1)
        a = ad.read_h5ad(Path("../shared/data") / name)
        a.obs_names_make_unique()
        a.obs[context_key] = a.obs[context_key].astype(str)
        model, budget = trilemma.train_sctrilemma(a.copy(), context_key, 240.0, seed, None, None, role)
        z = model.get_latent_representation()
        r = nmi_ari_kmeans(z, a.obs[label_key].astype(str).values, seed=seed)
        print(
            json.dumps(
                {
                    "data": name,
                    "seed": seed,
                    "cooldown": args.cooldown,
                    **budget,
                    **{k: round(v, 4) for k, v in r.items()},
                }
            ),
            flush=True,
        )
