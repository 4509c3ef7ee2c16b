"""Training plan: scvi-tools' TrainingPlan with the paper's AdamW, warm-up + cosine schedule and KL warm-up."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from scvi.train import TrainingPlan
from torch.optim.lr_scheduler import LambdaLR

if TYPE_CHECKING:
    from scvi.module.base import BaseModuleClass


def warmup_cosine(step: int, *, total_steps: int, warmup_steps: int) -> float:
    """Learning-rate factor: linear warm-up over ``warmup_steps``, then cosine decay to 0 at ``total_steps``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


class SCTrilemmaTrainingPlan(TrainingPlan):
    """:class:`~scvi.train.TrainingPlan` with the paper's optimisation recipe.

    Parameters
    ----------
    module
        The module to train.
    lr_warmup_fraction
        Fraction of all optimisation steps with a linear learning-rate warm-up; cosine decay follows.
    kl_warmup_fraction
        Fraction of all steps over which the KL weight rises linearly from ``min_kl_weight`` to
        ``max_kl_weight``. Ignored when ``n_epochs_kl_warmup`` or ``n_steps_kl_warmup`` is given.
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
        kl_warmup_fraction: float = 0.1,
        **kwargs,
    ) -> None:
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
        self.kl_warmup_fraction = kl_warmup_fraction

    def configure_optimizers(self) -> dict:
        """AdamW with a per-step warm-up + cosine schedule, sized from the trainer's step budget."""
        config = super().configure_optimizers()
        total_steps = max(1, int(self.trainer.estimated_stepping_batches))
        if self.n_epochs_kl_warmup is None and self.n_steps_kl_warmup is None:
            self.n_steps_kl_warmup = max(1, round(self.kl_warmup_fraction * total_steps))
        if not self.reduce_lr_on_plateau:
            warmup_steps = max(1, round(self.lr_warmup_fraction * total_steps))
            scheduler = LambdaLR(
                config["optimizer"],
                lambda step: warmup_cosine(step, total_steps=total_steps, warmup_steps=warmup_steps),
            )
            config["lr_scheduler"] = {"scheduler": scheduler, "interval": "step"}
        return config
