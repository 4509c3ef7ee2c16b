"""An exponential moving average of the weights, through Lightning's :class:`~lightning.pytorch.callbacks.WeightAveraging`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning.pytorch.callbacks import WeightAveraging
from lightning.pytorch.utilities import rank_zero_info

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
