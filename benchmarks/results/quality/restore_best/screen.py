"""One training run, two models: the small preset's stop as shipped (the averaged weights when the run ends), and the
averaged weights of the epoch with the best validation reconstruction loss, kept during the same run. Both are scored
by the Scorecard beside a PCA as ``gene_panel/mild/screen_panel.py`` scores one model, so the pair differs only in
the weights (trilemma.py's training: small preset, 240 s, its stop of 10 epochs).

Usage (from the repository root; one data set per one-thread process)::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/results/quality/restore_best/screen.py \
        --data zilionis2019_mouse_lung_cluey.h5ad --seeds 3 4 5 --out screen.jsonl
"""

import sys
import warnings

from lightning.pytorch.callbacks import Callback, WeightAveraging

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import headline_scores, record_row, screen_arguments, screen_runs

from sctrilemma.model._presets import EARLY_STOPPING_MONITOR
from sctrilemma.train._trainingplan import forget_prepared_blocks

warnings.filterwarnings("ignore")


class KeepBestAverage(Callback):
    """Keeps a copy of the averaged module's weights at the epoch with the lowest validation loss."""

    def __init__(self) -> None:
        self.best_loss = float("inf")
        self.best_step = -1
        self.best_state: dict | None = None

    def on_validation_end(self, trainer, pl_module) -> None:
        loss = trainer.callback_metrics.get(EARLY_STOPPING_MONITOR)
        if trainer.sanity_checking or loss is None or float(loss) >= self.best_loss:
            return
        averaging = next(c for c in trainer.callbacks if isinstance(c, WeightAveraging))
        if averaging._average_model is None:
            return
        self.best_loss, self.best_step = float(loss), int(trainer.global_step)
        averaged_module = averaging._average_model.module.module  # AveragedModel -> training plan -> module
        self.best_state = {k: v.detach().clone() for k, v in averaged_module.state_dict().items()}


if __name__ == "__main__":
    args = screen_arguments().parse_args()
    for name, seed, adata, keys, role in screen_runs(args.data, args.seeds):
        keep = KeepBestAverage()
        train = {"callbacks": [keep]}
        model, budget = trilemma.train_sctrilemma(adata.copy(), keys[1], 240.0, seed, None, None, role, train)
        rows = [{"tag": "stop", **headline_scores(adata.copy(), model, seed, *keys)}]
        model.module.load_state_dict(keep.best_state)
        forget_prepared_blocks(model.module)
        rows.append({"tag": "best", **headline_scores(adata, model, seed, *keys)})
        for row in rows:
            record_row({"data": name, "seed": seed, **budget, "best_step": keep.best_step, **row}, args.out)
