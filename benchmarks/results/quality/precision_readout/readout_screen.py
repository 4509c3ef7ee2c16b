"""One trained model read out three ways, scored on the same Scorecard samples (evaluation only).

- ``pooled``: the shipped embedding, the plain mean of the K token posterior means, centred on each dataset's prior.
- ``precision``: the tokens' posterior means weighted, per dimension, by their posterior precisions (the mean of a
  product of the K token Gaussians), centred the same way. The PB-Cond prior is shared by the K tokens and the
  weights sum to one, so the prior shift is the shipped one.
- ``scaled``: the shipped embedding with each dimension divided by its pooled posterior standard deviation averaged
  over the cells, so that axes the encoder is sure of count more in k-means and the kNN graph.

The script also prints how the token posteriors' log-variances spread (the module clamps them to [-4, 2]).

Usage (from the repository root; one data set per one-thread process)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/results/quality/precision_readout/readout_screen.py \
        --data zilionis2019_mouse_lung_cluey.h5ad --seeds 0 1 2 --out screen.jsonl
"""

import os
import sys
import warnings

import numpy as np

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import readout_scores, record_row, screen_arguments, screen_runs

warnings.filterwarnings("ignore")
READOUTS = ["X_pooled", "X_precision", "X_scaled"]
args = screen_arguments().parse_args()
for name, seed, adata, (label_key, context_key, _), role in screen_runs(args.data, args.seeds):
    model, budget = trilemma.train_sctrilemma(adata.copy(), context_key, 240.0, seed, None, None, role)
    pooled, pooled_var = model.get_latent_representation(return_dist=True)
    means, variances = model.get_latent_tokens(return_dist=True)
    shift = means.mean(axis=1) - pooled  # the prior shift the shipped embedding subtracts
    precision = 1.0 / variances
    adata.obsm["X_pooled"] = pooled
    adata.obsm["X_precision"] = (precision * means).sum(axis=1) / precision.sum(axis=1) - shift
    adata.obsm["X_scaled"] = pooled / np.sqrt(pooled_var.mean(axis=0))
    log_var = np.log(variances)
    spread = {
        "logvar_quantiles": [round(float(q), 3) for q in np.quantile(log_var, [0.01, 0.1, 0.5, 0.9, 0.99])],
        "logvar_at_floor": round(float((log_var < -3.999).mean()), 4),
        "token_logvar_sd": round(float(log_var.std(axis=1).mean()), 4),  # across tokens, per cell and dimension
    }
    print(name, seed, spread, flush=True)
    scores = readout_scores(adata, READOUTS, seed, label_key, context_key)
    row = {"data": name, "seed": seed, **budget, "load": os.getloadavg()[0], **spread, **scores}
    record_row(row, args.out)
