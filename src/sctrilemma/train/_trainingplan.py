"""Training plan: scvi-tools' TrainingPlan with the paper's AdamW, warm-up + cosine schedule and KL warm-up."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lightning.pytorch.callbacks import Timer
from scvi.train import TrainingPlan
from torch.optim.lr_scheduler import LambdaLR

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    import torch
    from scvi.module.base import BaseModuleClass


def warmup_cosine(step: int, *, total_steps: int | float, warmup_steps: int, time_progress: float = 0.0) -> float:
    """Learning-rate factor: linear warm-up over ``warmup_steps``, then cosine decay to 0.

    The decay follows whichever budget is spent faster: the steps (``step`` of ``total_steps``, which
    may be infinite) or the time (``time_progress``, the fraction of a wall-clock budget used).
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    step_progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    progress = min(1.0, max(step_progress, time_progress))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def planned_warmup(fraction: float, max_steps: int, planned_steps: int | float) -> int:
    """``fraction`` of the planned steps, at most ``max_steps``, at least 1 (``max_steps`` when unplanned)."""
    if not math.isfinite(planned_steps):
        return max(1, max_steps)
    return max(1, min(max_steps, round(fraction * planned_steps)))


class SCTrilemmaTrainingPlan(TrainingPlan):
    """:class:`~scvi.train.TrainingPlan` with the paper's optimisation recipe.

    The paper warms the learning rate up over 1,250 steps and the KL weight over 2,500, 5 % and 10 %
    of its 25,000 steps. Here each warm-up lasts that fraction of the planned steps but at most a
    fixed number of steps, so a run stopped by ``max_time``, early stopping or a generous
    ``max_epochs`` still leaves its warm-ups; the cosine decay then follows the step budget or the
    ``max_time`` budget, whichever is spent faster.

    Parameters
    ----------
    module
        The module to train.
    lr_warmup_fraction, max_lr_warmup_steps
        Linear learning-rate warm-up over ``lr_warmup_fraction`` of the planned steps, at most
        ``max_lr_warmup_steps``; cosine decay follows.
    kl_warmup_fraction, max_kl_warmup_steps
        The KL weight rises linearly from ``min_kl_weight`` to ``max_kl_weight`` over
        ``kl_warmup_fraction`` of the planned steps, at most ``max_kl_warmup_steps``. Ignored when
        ``n_epochs_kl_warmup`` or ``n_steps_kl_warmup`` is given.
    decoder_gene_offset_lr_scale
        Learning rate of the decoder's gene offsets (``decoder_gene_offset`` of the module), as a multiple of ``lr``;
        ignored by a module without them. The small preset's default is 2 (``TRAINING_DEFAULTS``).
    **kwargs
        Passed to :class:`~scvi.train.TrainingPlan` (``lr``, ``weight_decay``, ``max_kl_weight``, ...).
    """

    def __init__(
        self,
        module: BaseModuleClass,
        *,
        optimizer: str = "AdamW",
        lr: float = 2e-4,
        weight_decay: float = 1e-4,
        eps: float = 1e-8,
        max_kl_weight: float = 5e-4,
        n_epochs_kl_warmup: int | None = None,
        n_steps_kl_warmup: int | None = None,
        lr_warmup_fraction: float = 0.05,
        max_lr_warmup_steps: int = 1250,
        kl_warmup_fraction: float = 0.1,
        max_kl_warmup_steps: int = 2500,
        decoder_gene_offset_lr_scale: float = 1.0,
        **kwargs,
    ) -> None:
        scale = decoder_gene_offset_lr_scale
        if isinstance(scale, bool) or not (isinstance(scale, int | float) and scale > 0):
            raise ValueError(f"`decoder_gene_offset_lr_scale` must be a positive number, got {scale!r}.")
        super().__init__(
            module,
            optimizer=optimizer,
            lr=lr,
            weight_decay=weight_decay,
            eps=eps,
            max_kl_weight=max_kl_weight,
            n_epochs_kl_warmup=n_epochs_kl_warmup,
            n_steps_kl_warmup=n_steps_kl_warmup,
            **kwargs,
        )
        self.lr_warmup_fraction = lr_warmup_fraction
        self.max_lr_warmup_steps = max_lr_warmup_steps
        self.kl_warmup_fraction = kl_warmup_fraction
        self.max_kl_warmup_steps = max_kl_warmup_steps
        self.decoder_gene_offset_lr_scale = float(decoder_gene_offset_lr_scale)

    def time_progress(self) -> float:
        """Fraction of the trainer's ``max_time`` budget used so far (0 without one)."""
        for callback in self.trainer.callbacks:
            if isinstance(callback, Timer) and callback._duration is not None:
                return callback.time_elapsed("train") / max(callback._duration, 1e-9)
        return 0.0

    def get_optimizer_creator(self) -> Callable:
        """scvi-tools' optimizer creator, with the decoder's gene offsets as their own group at a scaled rate."""
        creator = super().get_optimizer_creator()
        offset = self.module.decoder.gene_offset
        if offset is None or self.decoder_gene_offset_lr_scale == 1.0:
            return creator

        def with_offset_group(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
            params = list(params)
            groups = [{"params": [p for p in params if p is not offset.weight]}]
            groups += [{"params": [offset.weight], "lr": self.lr * self.decoder_gene_offset_lr_scale}]
            return creator(groups)

        return with_offset_group

    def configure_optimizers(self) -> dict:
        """AdamW with a per-step warm-up + cosine schedule, sized from the trainer's step and time budgets."""
        config = super().configure_optimizers()
        planned = float(self.trainer.estimated_stepping_batches)
        if self.n_epochs_kl_warmup is None and self.n_steps_kl_warmup is None:
            self.n_steps_kl_warmup = planned_warmup(self.kl_warmup_fraction, self.max_kl_warmup_steps, planned)
        if not self.reduce_lr_on_plateau:
            warmup_steps = planned_warmup(self.lr_warmup_fraction, self.max_lr_warmup_steps, planned)
            scheduler = LambdaLR(
                config["optimizer"],
                lambda step: warmup_cosine(
                    step, total_steps=planned, warmup_steps=warmup_steps, time_progress=self.time_progress()
                ),
            )
            config["lr_scheduler"] = {"scheduler": scheduler, "interval": "step"}
        return config
