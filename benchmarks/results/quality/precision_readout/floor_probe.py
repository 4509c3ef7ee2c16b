"""Where the token posteriors' log-variances end with another starting value (``posterior_logvar_init``).

Trains one data set and seed as trilemma.py does (small preset, 240 s, the preset's stop) with the given start, and
prints the share of the token posteriors' log-variances at the module's floor (-4) and their 10th, 50th and 90th
percentiles over all cells, tokens and axes.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/results/quality/precision_readout/floor_probe.py \
        -3 zilionis2019_mouse_lung_cluey.h5ad 0
"""

import sys
import warnings

import numpy as np

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import screen_runs

warnings.filterwarnings("ignore")
start, name, seed = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for _, _, adata, keys, role in screen_runs([name], [seed]):
    model, budget = trilemma.train_sctrilemma(
        adata.copy(), keys[1], 240.0, seed, {"posterior_logvar_init": start}, None, role
    )
    _, variances = model.get_latent_tokens(return_dist=True)
    log_var = np.log(variances)
    quantiles = np.round(np.quantile(log_var, [0.1, 0.5, 0.9]), 2).tolist()
    share = (log_var < -3.999).mean()
    print(f"{name} seed {seed} start {start}: {budget['steps']} steps, floor share {share:.3f}, quantiles {quantiles}")
