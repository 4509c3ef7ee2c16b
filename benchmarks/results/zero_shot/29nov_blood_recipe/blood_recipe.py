"""Scratch: the blood reference as scripts/train_blood_reference.py trains it, with model options; a PCA beside.

Usage (repository root): ``python .../blood_recipe.py --genes union --seed 0 --model '{"encoder_genes": null,
"gene_panel_min_fraction": 0.1}' [--pca]``. Prints one JSON line: the zero-shot figures on Kang's held-out donors,
label transfer, steps and size.
"""

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import scvi
import torch

sys.path[:0] = ["scripts", "benchmarks"]
from train_blood_reference import (  # noqa: E402
    label_transfer_figures,
    load_blood_data,
    query_cells,
    reference_cells,
    zero_shot_figures,
)
from zero_shot import pca_zero_shot, transfer_accuracy  # noqa: E402

from sctrilemma import SCTrilemma  # noqa: E402

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
parser = argparse.ArgumentParser()
parser.add_argument("--genes", default="union")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--model", default="{}")
parser.add_argument("--pca", action="store_true")
args = parser.parse_args()
options = json.loads(args.model)
scvi.settings.seed = args.seed
blood = load_blood_data("../shared/data")
reference, query = reference_cells(blood, genes=args.genes), query_cells(blood)
row = {"genes": args.genes, "seed": args.seed, "model": options, "n_genes": int(reference.n_vars)}
if args.pca:
    ref_z, query_z, _ = pca_zero_shot(reference, query, args.seed)
    pca = zero_shot_figures(query_z, query, seed=args.seed)
    row["pca"] = {**pca, **transfer_accuracy(ref_z, reference, query_z, query)}
    torch.set_num_threads(1)
SCTrilemma.setup_anndata(reference, donor_key="donor", dataset_key="study")
model = SCTrilemma(reference, preset="small", **options)
start = time.perf_counter()
model.train(enable_progress_bar=False)
row["train_s"] = round(time.perf_counter() - start, 1)
row["steps"] = int(model.trainer.global_step)
with tempfile.TemporaryDirectory() as out:
    model.save(out, overwrite=True)
    row["size_mb"] = round((Path(out) / "model.safetensors").stat().st_size / 1e6, 2)
    reference.obsm["X_sctrilemma"] = model.get_latent_representation()
    query_model = SCTrilemma.load_query_data(query.copy(), out)
    figures = zero_shot_figures(query_model.get_latent_representation(), query, seed=args.seed)
    figures.update(label_transfer_figures(query_model.transfer_labels(reference, "cell_type"), query))
row["sctrilemma"] = figures
print(json.dumps(row), flush=True)
