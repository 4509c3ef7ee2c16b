"""Training that says what it does: a progress bar in seconds under a time budget, and why training ended early."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning.pytorch.callbacks import EarlyStopping, Timer
from lightning.pytorch.utilities import rank_zero_info
from scvi.train._progress import ProgressBar
from scvi.utils import track

if TYPE_CHECKING:
    import lightning.pytorch as pl


class TimeBudgetProgressBar(ProgressBar):
    """scvi-tools' progress bar counting the seconds of a ``max_time`` budget instead of epochs.

    With a time budget, ``max_epochs`` is only an upper bound (often 10,000), so a bar of epochs shows a meaningless
    estimate of the time left; this bar fills as the budget is spent and names the epoch in its description.
    """

    def _timer(self, trainer: pl.Trainer) -> Timer | None:
        return next((c for c in trainer.callbacks if isinstance(c, Timer) and c._duration is not None), None)

    def init_train_tqdm(self, trainer: pl.Trainer):
        """A bar whose total is the budget in whole seconds."""
        timer = self._timer(trainer)
        total = trainer.max_epochs if timer is None else int(timer._duration)
        return track(None, total=total, description="Training", style="tqdm", disable=self.is_disabled)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Name the epoch; the bar itself counts seconds."""
        if self._timer(trainer) is None:
            return super().on_train_epoch_start(trainer, pl_module)
        if self.is_enabled:
            self.main_progress_bar.set_description(f"Epoch {trainer.current_epoch + 1}, seconds")
        return None

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Move the bar to the seconds spent so far."""
        timer = self._timer(trainer)
        if timer is None:
            return super().on_train_epoch_end(trainer, pl_module)
        if self.is_enabled:
            spent = min(int(timer.time_elapsed()), self.main_progress_bar.total)
            self.main_progress_bar.update(spent - self.main_progress_bar.n)
            self.main_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))
        return None


class ReportedEarlyStopping(EarlyStopping):
    """Lightning's early stopping, saying once when and why it ended training.

    A :class:`~lightning.pytorch.callbacks.EarlyStopping` that logs one line when it stops a run.
    """

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Log one line when this callback stopped training."""
        if self.stopped_epoch > 0:
            rank_zero_info(
                f"Early stopping ended training after epoch {self.stopped_epoch + 1} (step {trainer.global_step}): "
                f"`{self.monitor}` had not improved for {self.patience} epochs (best {float(self.best_score):.4g}). "
                "Pass `early_stopping=False` to train the full length."
            )
