"""Callbacks of the training recipe: a weight average, a progress bar of seconds, and early stopping that says why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning.pytorch.callbacks import EarlyStopping, Timer, WeightAveraging
from lightning.pytorch.utilities import rank_zero_info
from scvi.train._progress import ProgressBar
from scvi.utils import track

if TYPE_CHECKING:
    import lightning.pytorch as pl
    import torch


class ExponentialWeightAverage(WeightAveraging):
    """Validate on, and end training with, an exponential moving average of the weights.

    Lightning's :class:`~lightning.pytorch.callbacks.WeightAveraging` keeps the average after every optimiser step,
    swaps it in for validation (so early stopping follows the averaged model) and copies it into the model when
    training ends. The average's decay warms up as ``min(decay, (1 + n) / (10 + n))`` after ``n`` updates, so a short
    run is not pulled towards its first steps' weights. Integer and boolean buffers (counters, masks) are not averaged:
    they follow the model.

    Parameters
    ----------
    decay
        The decay once warmed up: 0.99 averages over about the last hundred steps.
    """

    def __init__(self, decay: float = 0.99) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"`decay` must be in [0, 1), got {decay}.")
        self.decay = decay
        super().__init__(multi_avg_fn=self.average)

    def average(self, averaged: list[torch.Tensor], current: list[torch.Tensor], n_averaged: torch.Tensor) -> None:
        """Move ``averaged`` towards ``current`` in place, after ``n_averaged`` earlier updates."""
        n = float(n_averaged)
        weight = 1.0 - min(self.decay, (1.0 + n) / (10.0 + n))
        for average, value in zip(averaged, current, strict=True):
            if average.is_floating_point():
                average.lerp_(value, weight)
            else:
                average.copy_(value)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Copy the average into the model, and say so in one line."""
        super().on_train_end(trainer, pl_module)
        rank_zero_info(
            f"Training ended with the moving average of the weights over about the last {round(1 / (1 - self.decay))} "
            "steps, not the last step's weights (`weight_averaging=False` keeps those)."
        )


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
