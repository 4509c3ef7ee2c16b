"""The small preset trained as trilemma.py trains it (240 s), with the PB-Cond prior's parameters learning at a multiple
of the run's rate (``--prior-lr-scale``; 1 is the preset). Does a prior that learns each dataset's shift sooner mix
the datasets (Baron's species) earlier in a run? Scored by the Scorecard beside a PCA as
``gene_panel/mild/screen_panel.py`` scores one model. Run the arms side by side and pair them by seed.

Usage (from the repository root; one arm per one-thread process)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/results/quality/prior_rate/screen.py \
        --data baron2016_pancreas_subset_cider.h5ad --seeds 3 4 5 --prior-lr-scale 4 --out screen.jsonl
"""

import sys
import warnings

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import headline_scores, record_row, screen_arguments, screen_runs

from sctrilemma.train import SCTrilemmaTrainingPlan

warnings.filterwarnings("ignore")


def prior_learns_faster(scale: float) -> None:
    """Give the prior's parameters their own optimiser group at ``scale`` times the run's rate (in this process)."""
    shipped = SCTrilemmaTrainingPlan.get_optimizer_creator

    def creator_with_prior_group(plan):
        creator = shipped(plan)
        prior = {id(p) for p in plan.module.prior.parameters()}

        def grouped(params):
            params = list(params)
            optimizer = creator([p for p in params if id(p) not in prior])
            optimizer.add_param_group(
                {"params": [p for p in params if id(p) in prior], "lr": plan.lr * scale, "encoder": False}
            )
            return optimizer

        return grouped

    SCTrilemmaTrainingPlan.get_optimizer_creator = creator_with_prior_group


if __name__ == "__main__":
    parser = screen_arguments()
    parser.add_argument("--prior-lr-scale", type=float, required=True, help="1: the preset")
    args = parser.parse_args()
    if args.prior_lr_scale != 1.0:
        prior_learns_faster(args.prior_lr_scale)
    for name, seed, adata, keys, role in screen_runs(args.data, args.seeds):
        model, budget = trilemma.train_sctrilemma(adata.copy(), keys[1], 240.0, seed, None, None, role)
        scores = headline_scores(adata, model, seed, *keys)
        record_row({"data": name, "seed": seed, "prior_lr_scale": args.prior_lr_scale, **budget, **scores}, args.out)
