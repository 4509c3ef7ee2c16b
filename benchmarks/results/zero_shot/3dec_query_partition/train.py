"""Train the leave-Kang-out reference with the recipe for 240 s, save it, and save the query's embeddings.

Usage (from the repository root): ``OMP_NUM_THREADS=1 python benchmarks/results/zero_shot/3dec_query_partition/train.py
SEED OUT``. Writes ``OUT/model_SEED`` and ``OUT/query_z_SEED.npy``, and ``OUT/query_pca.npy`` (the projected PCA,
fitted with the seed), and prints both embeddings' zero-shot figures.
"""

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import scvi
import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "scripts")
import zero_shot as zs
from train_blood_reference import load_blood_data, query_cells, reference_cells, zero_shot_figures

from sctrilemma import SCTrilemma

warnings.filterwarnings("ignore")
seed, out = int(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
torch.set_num_threads(1)
blood = load_blood_data("../shared/data")
reference, query = reference_cells(blood, zs.SETTINGS["leave_kang_out"]), query_cells(blood)
scvi.settings.seed = seed
model, facts = zs.train_reference(
    reference, 240.0, model_kwargs={"encoder_genes": None, "gene_panel_min_fraction": 0.1}
)
print("steps", facts["steps"], "seconds", round(facts["train_s"]))
model.save(out / f"model_{seed}", overwrite=True)
query_z = SCTrilemma.load_query_data(query.copy(), model).get_latent_representation()
np.save(out / f"query_z_{seed}.npy", query_z)
print("sctrilemma", json.dumps(zero_shot_figures(query_z, query, seed=seed)))
_, pca_z, _ = zs.pca_zero_shot(reference, query, seed)
np.save(out / "query_pca.npy", pca_z)
print("pca", json.dumps(zero_shot_figures(pca_z, query, seed=seed)))
