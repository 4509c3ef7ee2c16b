"""Scratch: one seed of SCTrilemma on Zilionis as trilemma.py trains it (240 s), with ``train()`` arguments given as
JSON, and its embedding saved for ``geometry.py``.

Usage (repository root): ``python .../train_one.py SEED OUT.npy '{"early_stopping": false}'``.
"""

import json
import sys
import warnings

import numpy as np

sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
from screen_panel import screen_runs, trilemma

warnings.filterwarnings("ignore")
seed, out = int(sys.argv[1]), sys.argv[2]
train_kwargs = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
for _, _, a, keys, role in screen_runs(["zilionis2019_mouse_lung_cluey.h5ad"], [seed]):
    model, budget = trilemma.train_sctrilemma(a.copy(), keys[1], 240.0, seed, None, None, role, train_kwargs)
    np.save(out, model.get_latent_representation())
    print(json.dumps({"seed": seed, "train": train_kwargs, **budget}), flush=True)
