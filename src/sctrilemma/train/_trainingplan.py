"""Training plan: scvi-tools' TrainingPlan with the paper's AdamW, warm-up + cosine schedule and KL warm-up."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from lightning.pytorch.callbacks import Callback, Timer
from scvi.train import TrainingPlan
from torch.optim.lr_scheduler import LambdaLR

from sctrilemma.nn._attention import PreparedCache

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
        ignored by a module without them. The small preset's default is 2 (its ``PRESETS["small"]["plan"]``).
    encoder_lr_steps
        ``"run"``: the encoder follows the run's schedule. A number ``N``: the encoder's warm-up + cosine schedule
        ends after at most ``N`` steps, after which the encoder (its weights and its BatchNorm's statistics), and with
        it the embedding, stays as it is while the rest of the model trains on; its gradients are then no longer
        computed, except under multi-process training. Both are given back when training ends, also on an error.
        The small preset's default is its default length, 1,200 steps.
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
        encoder_lr_steps: int | Literal["run"] = "run",
        **kwargs,
    ) -> None:
        scale = decoder_gene_offset_lr_scale
        if isinstance(scale, bool) or not (isinstance(scale, int | float) and scale > 0):
            raise ValueError(f"`decoder_gene_offset_lr_scale` must be a positive number, got {scale!r}.")
        if encoder_lr_steps != "run" and (
            isinstance(encoder_lr_steps, bool) or not isinstance(encoder_lr_steps, int) or encoder_lr_steps < 1
        ):
            raise ValueError(
                "`encoder_lr_steps` must be a positive integer, or 'run' for the run's schedule; "
                f"got {encoder_lr_steps!r}."
            )
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
        self.encoder_lr_steps = encoder_lr_steps
        self._encoder_total_steps = math.inf
        self._frozen_encoder_parameters: list[torch.nn.Parameter] = []
        self._encoder_norm_momentum: float | None = None

    def time_progress(self) -> float:
        """Fraction of the trainer's ``max_time`` budget used so far (0 without one)."""
        for callback in self.trainer.callbacks:
            if isinstance(callback, Timer) and callback._duration is not None:
                return callback.time_elapsed("train") / max(callback._duration, 1e-9)
        return 0.0

    def get_optimizer_creator(self) -> Callable:
        """scvi-tools' optimizer creator, with parameter groups where the rates differ.

        The decoder's gene offsets get their own group at a scaled rate and, with ``encoder_lr_steps``, the
        encoder's parameters get their own group (marked ``"encoder": True``) for their own schedule.
        """
        creator = super().get_optimizer_creator()
        offset = self.module.decoder.gene_offset
        offset = None if offset is None or self.decoder_gene_offset_lr_scale == 1.0 else offset.weight
        if offset is None and self.encoder_lr_steps == "run":
            return creator
        encoder = {id(p) for p in self.module.encoder.parameters()} if self.encoder_lr_steps != "run" else set()

        def grouped(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
            params = list(params)
            # The encoder's parameters come first in the module, so the groups keep the parameters' order (and the
            # gradient clipping's sum its rounding).
            groups = [{"params": [p for p in params if id(p) in encoder], "encoder": True}]
            groups.append({"params": [p for p in params if p is not offset and id(p) not in encoder], "encoder": False})
            if offset is not None and any(p is offset for p in params):
                groups.append({"params": [offset], "lr": self.lr * self.decoder_gene_offset_lr_scale, "encoder": False})
            return creator([group for group in groups if group["params"]])

        return grouped

    def configure_optimizers(self) -> dict:
        """AdamW with a per-step warm-up + cosine schedule, sized from the trainer's step and time budgets."""
        config = super().configure_optimizers()
        planned = float(self.trainer.estimated_stepping_batches)
        if self.n_epochs_kl_warmup is None and self.n_steps_kl_warmup is None:
            self.n_steps_kl_warmup = planned_warmup(self.kl_warmup_fraction, self.max_kl_warmup_steps, planned)
        # The encoder's schedule: the run's, or as long as ``encoder_lr_steps`` when that comes first.
        steps = self.encoder_lr_steps
        self._encoder_total_steps = math.inf if steps == "run" else min(planned, steps)
        if not self.reduce_lr_on_plateau:
            warmup_steps = planned_warmup(self.lr_warmup_fraction, self.max_lr_warmup_steps, planned)

            def factor(total_steps: float) -> Callable[[int], float]:
                return lambda step: warmup_cosine(
                    step, total_steps=total_steps, warmup_steps=warmup_steps, time_progress=self.time_progress()
                )

            # only a finite ``encoder_lr_steps`` makes an encoder group, so its total is at most ``planned``
            factors = [
                factor(self._encoder_total_steps if group.get("encoder") else planned)
                for group in config["optimizer"].param_groups
            ]
            scheduler = LambdaLR(config["optimizer"], factors)
            config["lr_scheduler"] = {"scheduler": scheduler, "interval": "step"}
        return config

    def on_train_batch_start(self, batch: dict, batch_idx: int) -> None:
        """Once the encoder's schedule has ended, keep its BatchNorm's statistics and stop its gradients."""
        if self._encoder_norm_momentum is None and self.global_step >= self._encoder_total_steps:
            norm = self.module.encoder.posterior_norm
            self._encoder_norm_momentum, norm.momentum = norm.momentum, 0.0
            if self.trainer.world_size == 1:
                self._frozen_encoder_parameters = [p for p in self.module.encoder.parameters() if p.requires_grad]
                for parameter in self._frozen_encoder_parameters:
                    parameter.requires_grad_(False)
        return super().on_train_batch_start(batch, batch_idx)

    def on_validation_epoch_start(self) -> None:
        """Evaluate the weights now in the model, which a weight-averaging callback may have just swapped in."""
        forget_prepared_blocks(self.module)
        super().on_validation_epoch_start()

    def on_validation_epoch_end(self) -> None:
        """Forget the validated weights' prepared blocks: a weight-averaging callback swaps the trained ones back."""
        forget_prepared_blocks(self.module)
        super().on_validation_epoch_end()

    def on_train_end(self) -> None:
        """Give the encoder's parameters back their ``requires_grad``; forget blocks prepared from earlier weights."""
        self._unfreeze_encoder()
        forget_prepared_blocks(self.module)
        super().on_train_end()

    def configure_callbacks(self) -> list[Callback]:
        """A callback that gives the encoder back if training ends with an error or an interrupt."""
        return [*super().configure_callbacks(), _GiveBackEncoderOnException()]

    def _unfreeze_encoder(self) -> None:
        for parameter in self._frozen_encoder_parameters:
            parameter.requires_grad_(True)
        self._frozen_encoder_parameters = []
        if self._encoder_norm_momentum is not None:
            self.module.encoder.posterior_norm.momentum = self._encoder_norm_momentum
            self._encoder_norm_momentum = None


def forget_prepared_blocks(module: torch.nn.Module) -> None:
    """Drop every block prepared for evaluation in ``module``, so the next evaluation rebuilds them from its weights.

    The prepared blocks are rebuilt when a weight's storage or version changes. Callbacks that copy weights in through
    ``.data`` (Lightning's :class:`~lightning.pytorch.callbacks.WeightAveraging`) change neither, so the plan calls
    this after them.
    """
    for submodule in module.modules():
        for value in vars(submodule).values():
            if isinstance(value, PreparedCache):
                value.clear()


class _GiveBackEncoderOnException(Callback):
    """Restores what :class:`SCTrilemmaTrainingPlan` froze in the encoder when training stops with an exception."""

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(pl_module, SCTrilemmaTrainingPlan):
            pl_module._unfreeze_encoder()
