"""The same trained model read out several ways: its pooled embedding (the tokens' mean, centred on each dataset's
prior, as shipped), and a 50-component PCA of its K token means side by side, fitted on the training cells, both as
they come (``tokens_pca``) and centred on the same per-cell prior shift as the pooled embedding
(``tokens_centred_pca``). With a single dataset the shift is one vector, so the two PCAs agree. (The centred tokens
side by side without a PCA, 1,024 dimensions in the small preset, leave the Scorecard's depth R² undefined on these
data sets: its least squares needs more cells per fold than dimensions.) Evaluation only: one model per data set and
seed, every read-out scored by the Scorecard (identity, context mixing, depth; no reconstruction) on the same samples.

Usage (from the repository root; one data set per one-thread process)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/results/quality/token_readout/readout_screen.py \
        --data kang2018_pbmc_ctrl.h5ad --seeds 0 1 --out screen.jsonl
"""

import os
import sys
import warnings

import numpy as np
from sklearn.decomposition import PCA

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import readout_scores, record_row, screen_arguments, screen_runs

warnings.filterwarnings("ignore")
READOUTS = ["X_pooled", "X_tokens_pca", "X_tokens_centred_pca"]
args = screen_arguments().parse_args()
for name, seed, adata, (label_key, context_key, _), role in screen_runs(args.data, args.seeds):
    model, budget = trilemma.train_sctrilemma(adata.copy(), context_key, 240.0, seed, None, None, role)
    adata.obsm["X_pooled"] = model.get_latent_representation()
    tokens = np.asarray(model.get_latent_tokens())
    adata.obsm["X_tokens_pca"] = PCA(50, random_state=0).fit_transform(tokens.reshape(tokens.shape[0], -1))
    shift = tokens.mean(axis=1) - adata.obsm["X_pooled"]  # the prior shift the pooled embedding subtracts
    centred = (tokens - shift[:, None, :]).reshape(tokens.shape[0], -1)
    adata.obsm["X_tokens_centred_pca"] = PCA(50, random_state=0).fit_transform(centred)
    scores = readout_scores(adata, READOUTS, seed, label_key, context_key)
    row = {"data": name, "seed": seed, **budget, "load": os.getloadavg()[0], **scores}
    record_row(row, args.out)
