"""The small preset trained as trilemma.py trains it (240 s, or ``--budget-s``), its early stop watching another metric.

``--monitor`` names the metric: ``reconstruction_loss_validation`` is the preset's; ``elbo_validation`` adds the KL
of the posterior to the PB-Cond prior, unweighted, so the stop also sees the latent spreading. Scored by the
Scorecard beside a PCA as ``gene_panel/mild/screen_panel.py`` scores one model. Run the arms side by side and pair
them by seed.

Usage (from the repository root; one arm per one-thread process)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/results/quality/stop_monitor/screen.py \
        --data zilionis2019_mouse_lung_cluey.h5ad --seeds 3 4 5 --monitor elbo_validation --out screen.jsonl
"""

import sys
import warnings

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import headline_scores, record_row, screen_arguments, screen_runs

from sctrilemma.model import _presets

warnings.filterwarnings("ignore")

if __name__ == "__main__":
    parser = screen_arguments()
    parser.add_argument("--monitor", required=True, help="reconstruction_loss_validation: the preset")
    parser.add_argument("--budget-s", type=float, default=240.0, help="max_time in seconds (trilemma.py's: 240)")
    args = parser.parse_args()
    _presets.EARLY_STOPPING_MONITOR = args.monitor
    for name, seed, adata, keys, role in screen_runs(args.data, args.seeds):
        model, budget = trilemma.train_sctrilemma(adata.copy(), keys[1], args.budget_s, seed, None, None, role)
        scores = headline_scores(adata, model, seed, *keys)
        history = model.history
        validation = {
            key: [round(float(v), 2) for v in history[key].iloc[:, 0].dropna()]
            for key in ("reconstruction_loss_validation", "kl_local_validation", "elbo_validation")
            if key in history
        }
        record_row({"data": name, "seed": seed, "monitor": args.monitor, **budget, **scores, **validation}, args.out)
