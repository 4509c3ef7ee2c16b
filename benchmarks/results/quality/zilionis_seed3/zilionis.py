"""Zilionis as ``benchmarks/trilemma.py`` reads and trains it, for the scripts in this folder."""

import sys

import anndata as ad
import torch

sys.path.insert(0, "benchmarks")
import trilemma

NAME = "zilionis2019_mouse_lung_cluey.h5ad"
LABEL_KEY, CONTEXT_KEY, _ = trilemma.DATASETS[NAME]


def load() -> ad.AnnData:
    """The data set as the benchmark reads it."""
    adata = ad.read_h5ad(f"../shared/data/{NAME}")
    adata.obs_names_make_unique()
    adata.obs[CONTEXT_KEY] = adata.obs[CONTEXT_KEY].astype(str)
    return adata


def train(adata: ad.AnnData, seed: int):
    """SCTrilemma trained as the benchmark trains it (one thread, 240 s, the preset's stop): the model and its facts."""
    torch.set_num_threads(1)
    role = trilemma.default_context_role(NAME)
    return trilemma.train_sctrilemma(adata.copy(), CONTEXT_KEY, 240.0, seed, context_role=role)
