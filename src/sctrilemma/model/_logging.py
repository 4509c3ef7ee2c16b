"""What training prints: a step-level progress bar with the loss, and none of Lightning's chatter.

Lightning reports hardware (``GPU available: False ...``), a litlogger tip and its own deprecations on
every fit; none of them is something a user of :meth:`~sctrilemma.SCTrilemma.train` can act on.
They are silenced narrowly, for the duration of the fit, by logger name and exact message; every other
warning still reaches the user.
"""

from __future__ import annotations

import logging
import math
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

if TYPE_CHECKING:
    from collections.abc import Iterator

    import lightning.pytorch as pl

# scvi-tools' Trainer default; Lightning warns when an epoch has fewer steps than this interval.
LOG_EVERY_N_STEPS = 10
# Lightning's ``rank_zero_info`` messages (hardware summary, litlogger tip, "`Trainer.fit` stopped").
LIGHTNING_INFO_LOGGER = "lightning.pytorch.utilities.rank_zero"
# (category, message regex) of warnings raised inside Lightning that the user cannot act on.
HARMLESS_WARNINGS: tuple[tuple[type[Warning], str], ...] = (
    # torch >= 2.10 deprecates LeafSpec, which lightning 2.6's _pytree still instantiates.
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
    # Streamed (Census) training has no validation split; scvi-tools' own filter misses Lightning's new wording.
    (UserWarning, r"You defined a `validation_step` but have no `val_dataloader`"),
    # SomaDataModule shards its stream across workers itself, so its length is exact (tests/data/test_census.py).
    (UserWarning, r"Your `IterableDataset` has `__len__` defined"),
)


class StepProgressBar(TQDMProgressBar):
    """Lightning's step-level bar, titled ``Epoch i/n`` as scvi-tools' bar, with the last step's ``loss``."""

    def __init__(self, refresh_rate: int = 1) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self._step_loss: float | None = None

    def on_train_epoch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        """Title the bar ``Epoch i/n`` (1-based, as scvi-tools' bar)."""
        super().on_train_epoch_start(trainer, *args)
        total = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else None
        if trainer.max_steps not in (None, -1):  # max_steps ends the run: the epoch it ends in is the total
            batches = trainer.num_training_batches
            by_steps = math.ceil(trainer.max_steps / batches) if 0 < batches < math.inf else None
            total = min(total, by_steps) if total and by_steps else None
        epoch = trainer.current_epoch + 1
        self.train_progress_bar.set_description(f"Epoch {epoch}/{total}" if total else f"Epoch {epoch}")

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Remember the step's loss, then advance the bar."""
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None and not self.is_disabled:
            self._step_loss = float(loss)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, int | str | float]:
        """The logged progress-bar metrics plus this step's ``loss``, without Lightning's ``v_num``."""
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        if self._step_loss is not None:
            items = {"loss": f"{self._step_loss:.4g}", **items}
        return items


def training_display_kwargs(trainer_kwargs: dict, steps_per_epoch: int | None) -> dict:
    """``trainer_kwargs`` with the step-level progress bar and a fitting logging interval, unless the user set them.

    Parameters
    ----------
    trainer_kwargs
        Keyword arguments for :class:`~scvi.train.Trainer`; not modified.
    steps_per_epoch
        Training steps in one epoch, when known.

    Returns
    -------
    A new dict. ``log_every_n_steps`` becomes ``min(10, steps_per_epoch)`` (Lightning warns when an
    epoch is shorter than the interval). Unless the user passed ``simple_progress_bar``, a progress-bar
    callback or ``enable_progress_bar=False``, scvi-tools' epoch-level bar is replaced by
    :class:`StepProgressBar`.
    """
    kwargs = dict(trainer_kwargs)
    if steps_per_epoch is not None and "log_every_n_steps" not in kwargs:
        kwargs["log_every_n_steps"] = max(1, min(LOG_EVERY_N_STEPS, steps_per_epoch))
    callbacks = list(kwargs.get("callbacks") or [])
    if (
        kwargs.get("enable_progress_bar", True)
        and "simple_progress_bar" not in kwargs
        and not any(isinstance(callback, ProgressBar) for callback in callbacks)
    ):
        kwargs["simple_progress_bar"] = False
        kwargs["callbacks"] = [*callbacks, StepProgressBar()]
    return kwargs


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """Silence Lightning's informational messages and known-harmless warnings while the block runs.

    The info logger is only raised to ``WARNING`` when the user has not set its level; warnings are
    filtered by category and exact message, so Lightning's other warnings still show.
    """
    info_logger = logging.getLogger(LIGHTNING_INFO_LOGGER)
    user_level = info_logger.level
    with warnings.catch_warnings():
        for category, message in HARMLESS_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category)
        if user_level == logging.NOTSET:
            info_logger.setLevel(logging.WARNING)
        try:
            yield
        finally:
            info_logger.setLevel(user_level)
