"""Scratch: time get_normalized_expression of 3,000 Kang cells after 30 training steps (decoder width per env).

Run from the repository root with the patch applied: ``SCTRI_DEC_FFN=0 python .../speed_probe.py`` (and ``=1``).
"""

import json
import os
import time
import warnings

import anndata as ad
import numpy as np
import torch

from sctrilemma import SCTrilemma

warnings.filterwarnings("ignore")
torch.set_num_threads(2)
adata = ad.read_h5ad("../shared/data/kang2018_pbmc_ctrl.h5ad")
adata.obs_names_make_unique()
SCTrilemma.setup_anndata(adata, donor_key="donor")
model = SCTrilemma(adata, preset="small")
model.train(max_steps=30, enable_progress_bar=False)
torch.set_num_threads(2)
cells = np.arange(3000)
model.get_normalized_expression(indices=cells[:200], library_size=1e4, return_numpy=True)  # warm-up
times = []
for _ in range(3):
    start = time.perf_counter()
    model.get_normalized_expression(indices=cells, library_size=1e4, return_numpy=True)
    times.append(time.perf_counter() - start)
start = time.perf_counter()
model.get_latent_representation(indices=cells)
latent_s = time.perf_counter() - start
decoder_parameters = sum(p.numel() for p in model.module.decoder.parameters())
row = {"ffn": os.environ.get("SCTRI_DEC_FFN", "preset"), "expr_s": [round(t, 2) for t in times]}
print(json.dumps({**row, "latent_s": round(latent_s, 2), "params": decoder_parameters}))
