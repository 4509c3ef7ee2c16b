"""Zilionis as ``benchmarks/trilemma.py`` reads and trains it, for the scripts in this folder."""

import sys

import anndata as ad
import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import labelled_data

NAME = "zilionis2019_mouse_lung_cluey.h5ad"
LABEL_KEY, CONTEXT_KEY, _ = trilemma.DATASETS[NAME]


def load() -> ad.AnnData:
    """The data set as the benchmark reads it."""
    return labelled_data(NAME, CONTEXT_KEY)


def train(adata: ad.AnnData, seed: int):
    """SCTrilemma trained as the benchmark trains it (one thread, 240 s, the preset's stop): the model and its facts."""
    torch.set_num_threads(1)
    role = trilemma.default_context_role(NAME)
    return trilemma.train_sctrilemma(adata.copy(), CONTEXT_KEY, 240.0, seed, context_role=role)


def kmeans_nmi(x: np.ndarray, labels: np.ndarray, seed: int) -> float:
    """Mean NMI of 20 single-start k-means partitions of ``x`` into as many clusters as ``labels`` has types."""
    n_types = np.unique(labels).size
    fits = [KMeans(n_types, n_init=1, random_state=seed + r).fit_predict(x) for r in range(20)]
    return float(np.mean([normalized_mutual_info_score(labels, f) for f in fits]))


def centred_within(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``values`` (cells × columns) less the mean of each cell's type."""
    out = values.astype(float).copy()
    for t in np.unique(labels):
        out[labels == t] -= out[labels == t].mean(0)
    return out


def between_share(x: np.ndarray, labels: np.ndarray) -> float:
    """The share of ``x``'s variance over cells that lies between the centroids of ``labels``' types."""
    return float(1 - (centred_within(x, labels) ** 2).sum() / ((x - x.mean(0)) ** 2).sum())
