"""Scratch: one seed of SCTrilemma (trilemma's training, 240 s) and scVI (240 s) on Zilionis, and the PCA; saves
the embeddings. Usage (repository root): ``python .../train_pair.py SEED OUT_DIR``."""

import sys
import warnings

import anndata as ad
import numpy as np
import torch

sys.path.insert(0, "benchmarks")
import trilemma

from sctrilemma.benchmark._baselines import pca_baseline, scvi_baseline

warnings.filterwarnings("ignore")
seed = int(sys.argv[1])
out = sys.argv[2]
torch.set_num_threads(1)
a = ad.read_h5ad("../shared/data/zilionis2019_mouse_lung_cluey.h5ad")
a.obs_names_make_unique()
a.obs["Animal"] = a.obs["Animal"].astype(str)
model, b = trilemma.train_sctrilemma(a.copy(), "Animal", 240.0, seed)
np.save(f"{out}/sct_seed{seed}.npy", model.get_latent_representation())
model.save(f"{out}/model_seed{seed}", overwrite=True)
print(b, flush=True)
torch.set_num_threads(1)
r = scvi_baseline(a, time_budget_s=240, seed=seed, reconstruct=False)
np.save(f"{out}/scvi_seed{seed}.npy", r.embedding)
np.save(f"{out}/pca.npy", pca_baseline(a, seed=seed).embedding)
print("done", flush=True)
