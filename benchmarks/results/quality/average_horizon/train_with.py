"""The small preset trained as trilemma.py trains it (240 s), with the shipped weight average or a longer one that
the stop then validates and that the model keeps. Scored by the Scorecard beside a PCA as
``gene_panel/mild/screen_panel.py`` scores one model. Run both arms side by side and pair them by seed: under
``max_time`` the schedule follows the clock, so the two arms are two runs.

``--k 10`` is the shipped average (``ExponentialWeightAverage``); another ``k`` moves the average towards each step's
weights by ``(k - 1) / (k + n)`` after ``n`` updates with no floor (``screen.py`` says what that holds).

Usage (from the repository root; one arm per one-thread process)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/results/quality/average_horizon/train_with.py \
        --data zilionis2019_mouse_lung_cluey.h5ad --seeds 3 4 5 --k 5 --out train_with.jsonl
"""

import sys
import warnings

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import headline_scores, record_row, screen_arguments, screen_runs

from sctrilemma.train import ExponentialWeightAverage

warnings.filterwarnings("ignore")


class LongerAverage(ExponentialWeightAverage):
    """The shipped average with ``(k - 1) / (k + n)`` as its step and no floor."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def average(self, averaged, current, n_averaged) -> None:
        weight = (self.k - 1) / (self.k + float(n_averaged))
        for average, value in zip(averaged, current, strict=True):
            if average.is_floating_point():
                average.lerp_(value, weight)
            else:
                average.copy_(value)


if __name__ == "__main__":
    parser = screen_arguments()
    parser.add_argument("--k", type=int, required=True, help="10: the shipped average")
    args = parser.parse_args()
    for name, seed, adata, keys, role in screen_runs(args.data, args.seeds):
        train = {} if args.k == 10 else {"callbacks": [LongerAverage(args.k)]}
        model, budget = trilemma.train_sctrilemma(adata.copy(), keys[1], 240.0, seed, None, None, role, train)
        scores = headline_scores(adata, model, seed, *keys)
        record_row({"data": name, "seed": seed, "k": args.k, **budget, **scores}, args.out)
