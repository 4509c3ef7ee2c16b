"""Screen a training plan on the small labelled sets: SCTrilemma as trilemma.py trains it (240 s, the preset's stop),
scored by the Scorecard beside a PCA (no scVI), as ``../gene_panel/mild/screen_panel.py`` scores it.

Usage (from the repository root; the two arms in two processes side by side)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/results/quality/kl_weight_small_sets/screen.py \
        --data zilionis2019_mouse_lung_cluey.h5ad baron2016_pancreas_subset_cider.h5ad --seeds 3 4 5 \
        --plan '{"max_kl_weight": 0.005}' --tag kl5e-3      # and without --plan: --tag base
"""

import argparse
import json
import sys
import warnings

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import headline_scores, labelled_data

warnings.filterwarnings("ignore")
parser = argparse.ArgumentParser()
parser.add_argument("--data", nargs="+")
parser.add_argument("--seeds", nargs="+", type=int)
parser.add_argument("--plan", default="{}", help="SCTrilemma plan_kwargs, as JSON")
parser.add_argument("--tag", required=True)
args = parser.parse_args()
plan = json.loads(args.plan) or None
for name in args.data:
    label_key, context_key, symbol_key = trilemma.DATASETS[name]
    role = trilemma.default_context_role(name)
    for seed in args.seeds:
        adata = labelled_data(name, context_key)
        model, budget = trilemma.train_sctrilemma(adata.copy(), context_key, 240.0, seed, None, plan, role)
        scores = headline_scores(adata, model, seed, label_key, context_key, symbol_key)
        print(json.dumps({"tag": args.tag, "data": name, "seed": seed, **budget, **scores}), flush=True)
