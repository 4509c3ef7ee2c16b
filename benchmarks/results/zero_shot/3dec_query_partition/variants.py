"""The saved leave-Kang-out references' query, k-means partitions and embedding-time variants of the crop.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/results/zero_shot/3dec_query_partition/variants.py OUT SEED [SEED ...]``
after ``train.py``. For each embedding (``OUT/query_z_SEED.npy``, ``OUT/query_pca.npy``) it prints the lowest-inertia
k-means partition of 20 single starts against the cell types, and the cells each model assigns to another type's
cluster than the PCA does, with their depth and marker counts. Then, per saved model, the zero-shot figures with the
embedding crop (the query cell's top expressed genes) changed at embedding time only: other crop sizes, equal counts
at the crop's edge taken in other orders (the shipped rule is gene order), and the mean of 8 embeddings with ties in
random order.
"""

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "scripts")
import zero_shot as zs
from train_blood_reference import load_blood_data, query_cells, reference_cells, zero_shot_figures

from sctrilemma import SCTrilemma
from sctrilemma.module import _module as module_code
from sctrilemma.module._tokens import expressed_crop

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
out, seeds = Path(sys.argv[1]), [int(s) for s in sys.argv[2:]]
blood = load_blood_data("../shared/data")
query = query_cells(blood)
labels = query.obs["cell_type"].astype(str).to_numpy()
counts = query.X.tocsr()
symbols = list(query.var["gene_symbol"].astype(str))
MARKERS = {
    "B": ["CD79A", "CD79B", "MS4A1", "CD74", "HLA-DRA"],
    "T": ["CD3D", "CD3E", "IL7R", "LDHB"],
    "Mono": ["LYZ", "S100A9", "S100A8", "CST3"],
    "NK": ["NKG7", "GNLY", "GZMB"],
}


def partition_calls(embedding: np.ndarray) -> np.ndarray:
    """Each cell's call: the majority cell type of its cluster in the lowest-inertia of 20 single k-means starts."""
    starts = [KMeans(4, n_init=1, random_state=r).fit(embedding) for r in range(20)]
    scores = [normalized_mutual_info_score(labels, start.labels_) for start in starts]
    print(f"NMI of the 20 starts: {min(scores):.4f}-{max(scores):.4f}")
    best = min(starts, key=lambda k: k.inertia_)
    calls = np.empty(labels.size, dtype=object)
    for cluster in np.unique(best.labels_):
        calls[best.labels_ == cluster] = pd.Series(labels[best.labels_ == cluster]).mode()[0]
    return calls


cells = pd.DataFrame({"label": labels, "depth": np.asarray(counts.sum(1)).ravel()})
for name, genes in MARKERS.items():
    cells[name] = np.asarray(counts[:, [symbols.index(g) for g in genes if g in symbols]].sum(1)).ravel()
print("median depth and marker counts by type\n", cells.groupby("label").median().to_string())
cells["pca"] = partition_calls(np.load(out / "query_pca.npy"))
print("PCA: cells called another type", int((cells.pca != cells.label).sum()))
for seed in seeds:
    cells[f"seed{seed}"] = calls = partition_calls(np.load(out / f"query_z_{seed}.npy"))
    wrong, pca_wrong = calls != labels, cells.pca.to_numpy() != labels
    print(f"seed {seed}: called another type {wrong.sum()}, of which also by PCA {(wrong & pca_wrong).sum()}")
    print(pd.crosstab(cells.label, calls).to_string())
    print(cells[wrong & ~pca_wrong].to_string())

rule = {"name": "gene order", "draw": 0}
reference = reference_cells(blood, zs.SETTINGS["leave_kang_out"])
detected = np.asarray((reference.X > 0).mean(0)).ravel()
orders = {
    "reverse gene order": torch.arange(reference.n_vars - 1, -1, -1),
    "rarest gene first": torch.as_tensor(np.argsort(detected, kind="stable")),
    "commonest gene first": torch.as_tensor(np.argsort(-detected, kind="stable")),
}


def embedding_crop(x, crop_size, random_ties=False, generator=None, among=None):
    """The shipped crop, or (at embedding time) the same with equal counts in the order ``rule`` names."""
    if random_ties or rule["name"] == "gene order":
        return expressed_crop(x, crop_size, random_ties, generator, among)
    if rule["name"] == "random ties":
        draw = torch.Generator().manual_seed((int(x.sum().item()) + rule["draw"]) % 2**31)
        return expressed_crop(x, crop_size, True, draw, among)
    order = orders[rule["name"]]
    crop = expressed_crop(x[:, order], crop_size)
    return crop._replace(genes=order[crop.genes])


module_code.expressed_crop = embedding_crop
for seed in seeds:
    query_model = SCTrilemma.load_query_data(query.copy(), SCTrilemma.load(str(out / f"model_{seed}")))
    for crop_size in (256, 384, 512, 1024):
        query_model.module.crop_size = crop_size
        figures = zero_shot_figures(query_model.get_latent_representation(), query, seed=seed)
        print(seed, f"crop {crop_size}, gene order", json.dumps(figures), flush=True)
    query_model.module.crop_size = 256
    for name in ["random ties", *orders]:
        rule["name"] = name
        figures = zero_shot_figures(query_model.get_latent_representation(), query, seed=seed)
        print(seed, f"crop 256, {name}", json.dumps(figures), flush=True)
    rule["name"] = "random ties"
    draws = []
    for draw in range(8):
        rule["draw"] = 1000 * draw
        draws.append(query_model.get_latent_representation())
    figures = zero_shot_figures(np.mean(draws, axis=0), query, seed=seed)
    print(seed, "crop 256, mean of 8 random-tie embeddings", json.dumps(figures), flush=True)
    rule["name"] = "gene order"
