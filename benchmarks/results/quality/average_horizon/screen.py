"""One training run, several weight averages: the small preset's average as shipped, and averages over a longer part
of the same run, kept beside it without touching the training. Each is scored by the Scorecard beside a PCA as
``gene_panel/mild/screen_panel.py`` scores one model, so the models differ only in which averaged weights they hold.

The shipped average (``ExponentialWeightAverage``) moves towards each step's weights by ``(k - 1) / (k + n)`` after
``n`` updates with ``k = 10``, until that falls to 0.01 (after about 900 steps). After ``n`` steps such an average
weighs step ``j`` about in proportion to ``(j / n) ** (k - 1)``, so the mean age of what it holds is about
``n / (k + 1)`` steps: ``n / 11`` for the shipped one (100 steps once floored). The longer averages here
(``--horizons``, by default ``k = 5`` and ``k = 3``) have no floor: their mean ages are ``n / 6`` and ``n / 4``.

Usage (from the repository root; one data set per one-thread process)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/results/quality/average_horizon/screen.py \
        --data zilionis2019_mouse_lung_cluey.h5ad --seeds 3 4 5 --out screen.jsonl
"""

import sys
import warnings

import torch
from lightning.pytorch.callbacks import Callback

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import headline_scores, record_row, screen_arguments, screen_runs
from train_with import LongerAverage

from sctrilemma.train._trainingplan import forget_prepared_blocks

warnings.filterwarnings("ignore")


class LongerAverages(Callback):
    """Averages of the module's weights after every training step, one per ``k`` in ``horizons``."""

    def __init__(self, horizons: tuple[int, ...]) -> None:
        self.rules = {k: LongerAverage(k) for k in horizons}
        self.n_updates = 0
        self.averages: dict[int, dict] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        state = pl_module.module.state_dict()
        for k, rule in self.rules.items():
            if k not in self.averages:
                self.averages[k] = {name: value.detach().clone() for name, value in state.items()}
                continue
            current = [state[name].detach() for name in self.averages[k]]
            rule.average(list(self.averages[k].values()), current, torch.tensor(self.n_updates))
        self.n_updates += 1


if __name__ == "__main__":
    parser = screen_arguments()
    parser.add_argument("--horizons", nargs="+", type=int, default=[5, 3], help="the averages' k")
    args = parser.parse_args()
    for name, seed, adata, keys, role in screen_runs(args.data, args.seeds):
        averages = LongerAverages(tuple(args.horizons))
        train = {"callbacks": [averages]}
        model, budget = trilemma.train_sctrilemma(adata.copy(), keys[1], 240.0, seed, None, None, role, train)
        scores = {"shipped": headline_scores(adata.copy(), model, seed, *keys)}
        for k in args.horizons:
            model.module.load_state_dict(averages.averages[k])
            forget_prepared_blocks(model.module)
            scores[f"k{k}"] = headline_scores(adata.copy(), model, seed, *keys)
        for tag, row in scores.items():
            record_row({"data": name, "seed": seed, **budget, "tag": tag, **row}, args.out)
