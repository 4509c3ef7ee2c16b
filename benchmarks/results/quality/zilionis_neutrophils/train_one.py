"""Scratch: one seed of SCTrilemma on Zilionis as trilemma.py trains it (240 s), with ``train()`` arguments given as
JSON, and its embedding saved for ``geometry.py``.

Usage (repository root): ``python .../train_one.py SEED OUT.npy '{"early_stopping": false}'``.
"""

import json
import sys
import warnings

import anndata as ad
import numpy as np
import torch

sys.path.insert(0, "benchmarks")
import trilemma

warnings.filterwarnings("ignore")
seed, out = int(sys.argv[1]), sys.argv[2]
train_kwargs = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
torch.set_num_threads(1)
a = ad.read_h5ad("../shared/data/zilionis2019_mouse_lung_cluey.h5ad")
a.obs_names_make_unique()
a.obs["Animal"] = a.obs["Animal"].astype(str)
model, budget = trilemma.train_sctrilemma(a.copy(), "Animal", 240.0, seed, train_kwargs=train_kwargs)
np.save(out, model.get_latent_representation())
print(json.dumps({"seed": seed, "train": train_kwargs, **budget}), flush=True)
