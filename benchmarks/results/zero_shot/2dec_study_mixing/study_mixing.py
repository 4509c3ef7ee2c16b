"""Scratch: how much the shared-gene blood reference's studies mix, by gene start, with the zero-shot figures.

Trains the reference as ``scripts/train_blood_reference.py --genes shared`` does (its functions, its length), one
thread, and prints one JSON line: the share of a reference cell's 15 nearest neighbours (over all 12,457 reference
cells) from another study, overall and per study, beside the zero-shot figures on Kang's held-out donors.

Usage (repository root): ``python .../study_mixing.py --seed 0 [--model '{"gene_embedding_init": "pca"}']``.
"""

import argparse
import json
import sys
import time
import warnings

import numpy as np
import scvi
import torch

sys.path[:0] = ["scripts", "benchmarks"]
from train_blood_reference import load_blood_data, query_cells, reference_cells, zero_shot_figures  # noqa: E402
from zero_shot import other_study_shares  # noqa: E402

from sctrilemma import SCTrilemma  # noqa: E402

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--model", default="{}")
args = parser.parse_args()
options = json.loads(args.model)
scvi.settings.seed = args.seed
blood = load_blood_data("../shared/data")
reference, query = reference_cells(blood, genes="shared"), query_cells(blood)
SCTrilemma.setup_anndata(reference, donor_key="donor", dataset_key="study")
model = SCTrilemma(reference, preset="small", **options)
start = time.perf_counter()
model.train(enable_progress_bar=False)
row = {"seed": args.seed, "model": options, "train_s": round(time.perf_counter() - start, 1)}
embedding = model.get_latent_representation()
studies = reference.obs["study"].astype(str).to_numpy()
other = other_study_shares(embedding, studies)
row["other_study_share"] = round(float(other.mean()), 4)
row["other_study_share_by_study"] = {
    study: round(float(other[studies == study].mean()), 4) for study in np.unique(studies)
}
query_model = SCTrilemma.load_query_data(query.copy(), model)
row["zero_shot"] = zero_shot_figures(query_model.get_latent_representation(), query, seed=args.seed)
print(json.dumps(row), flush=True)
