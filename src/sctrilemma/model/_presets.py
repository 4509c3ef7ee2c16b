"""Named architecture presets; explicit constructor arguments override them."""

from __future__ import annotations

from typing import Literal

import torch
from lightning.pytorch.callbacks import WeightAveraging
from scvi.model._utils import get_max_epochs_heuristic

from sctrilemma.train._progress import ReportedEarlyStopping, TimeBudgetProgressBar
from sctrilemma.train._threads import CpuThreadTuner, user_chose_threads
from sctrilemma.train._weight_averaging import ExponentialWeightAverage

Preset = Literal["paper", "small"]


PRESETS: dict[str, dict[str, int | float | str | None]] = {
    # The paper's configuration (Appendix B, Table "Architecture settings").
    "paper": {
        "n_hidden": 512,
        "n_latent_tokens": 64,
        "crop_size": 4096,
        "n_encoder_layers": 3,
        "n_decoder_layers": 3,
        "n_heads": 8,
        "dropout_rate": 0.1,
        "ffn_multiplier": 4.0,
        "n_decoder_targets": None,
        "posterior_logvar_init": 0.0,
        "gene_embedding_init": "normal",
        "decoder_gene_offset": False,
        "min_depth_fraction": 1.0,
        "embedding_depth_quantile": None,
        "encoder_genes": None,
        "embedding_centred_on_prior": False,
    },
    # Same architecture, sized to train on a laptop CPU in minutes, with a recipe for short runs: one attention head
    # (the attention's cost grows with the heads), many decoupled, weighted decoder targets with a narrow
    # feed-forward layer, no dropout, a less noisy starting posterior, the encoder's input binomially thinned to
    # 40-100 % of each cell's depth in training and to the training cells' 10th-percentile depth for embedding, the
    # encoder reading the 4,000 most variable genes where there are more and, on many genes, gene embeddings that
    # start from the data, on fewer the decoder's own gene offsets; it reports each cell's embedding relative to its
    # dataset's mean PB-Cond prior mean, and its training keeps an average of the weights
    # (WEIGHT_AVERAGING; docs/user_guide.md, "Where the small preset departs from the paper", with the figures).
    "small": {
        "n_hidden": 64,
        "n_latent_tokens": 16,
        "crop_size": 256,
        "n_encoder_layers": 2,
        "n_decoder_layers": 1,
        "n_heads": 1,
        "dropout_rate": 0.0,
        "ffn_multiplier": 1.0,
        "n_decoder_targets": 512,
        "posterior_logvar_init": -4.0,
        "gene_embedding_init": "auto",
        "decoder_gene_offset": "auto",
        "min_depth_fraction": 0.4,
        "embedding_depth_quantile": 0.1,
        "encoder_genes": 4000,
        "embedding_centred_on_prior": True,
    },
}


# Training length when ``train()`` is given neither ``max_epochs`` nor ``max_steps``. The paper preset keeps scVI's
# epoch heuristic with a cap of 50 epochs (each cell costs far more than in scVI). The small preset's default is a
# number of steps, its encoder's schedule: its embedding separates cell types best after about a thousand steps. On
# data sets larger than those steps cover (76,800 cells at the default batch) it trains one pass over the training
# cells, so that the decoder, which trains on after the encoder's schedule, sees every cell.
DEFAULT_EPOCHS_CAP = 50
DEFAULT_STEPS: dict[str, int | None] = {"paper": None, "small": 1200}

# Optimisation defaults per preset; ``plan_kwargs`` override them. The paper's 2e-4 and warm-ups of 1,250 and 2,500
# steps suit its 25,000 steps; the small preset trains for hundreds to a few thousand steps on a CPU, where a larger
# step and short warm-ups learn far more, and the decoder's gene offsets learn at twice the rate. Its encoder's
# schedule ends with the default length, so a longer run trains on the decoder with the embedding kept as it was at
# that length: the embedding loses cell identity when its encoder trains on, while the reconstruction keeps improving
# with the decoder alone (docs/user_guide.md, "Training length").
TRAINING_DEFAULTS: dict[str, dict[str, float | int]] = {
    "paper": {"lr": 2e-4, "max_lr_warmup_steps": 1250, "max_kl_warmup_steps": 2500},
    "small": {
        "lr": 5e-3,
        "max_lr_warmup_steps": 50,
        "max_kl_warmup_steps": 100,
        "decoder_gene_offset_lr_scale": 2.0,
        "encoder_lr_steps": DEFAULT_STEPS["small"],
    },
}


# Early stopping, on by default for the small preset: training ends once the validation cells' reconstruction loss
# has not improved for this many epochs. Data sets of a few hundred cells pass their best within the default length and
# then overfit, and their embedding decays with it (docs/user_guide.md). The paper's recipe trains
# for a fixed length.
EARLY_STOPPING_PATIENCE: dict[str, int | None] = {"paper": None, "small": 10}
EARLY_STOPPING_MONITOR = "reconstruction_loss_validation"


def early_stopping_kwargs(preset: str, trainer_kwargs: dict, has_validation_cells: bool) -> dict:
    """``trainer_kwargs`` with the preset's early stopping, unless the user chose (``early_stopping=True/False``).

    The stop is Lightning's :class:`~lightning.pytorch.callbacks.EarlyStopping`, with the validation cells scored every
    epoch; it logs one line when it ends training. Unlike ``early_stopping=True`` (scvi-tools' callback), it does not
    fail a run that ends before its first validation, such as a ``max_steps`` shorter than an epoch: such a run trains
    its full length.
    """
    patience = EARLY_STOPPING_PATIENCE[preset]
    if patience is None or not has_validation_cells or "early_stopping" in trainer_kwargs:
        return trainer_kwargs
    stop = ReportedEarlyStopping(monitor=EARLY_STOPPING_MONITOR, patience=patience, mode="min", strict=False)
    return {
        **trainer_kwargs,
        "callbacks": [*(trainer_kwargs.get("callbacks") or []), stop],
        "check_val_every_n_epoch": trainer_kwargs.get("check_val_every_n_epoch", 1),
    }


# The small preset validates on, and ends training with, an exponential moving average of its weights
# (ExponentialWeightAverage: about the last hundred steps): its learning rate stays high to the end of short runs, and
# small data sets stop early, so the weights at any one step carry that step's noise
# (docs/user_guide.md). The paper's recipe uses the weights as trained.
WEIGHT_AVERAGING: dict[str, bool] = {"paper": False, "small": True}


def weight_averaging_kwargs(preset: str, trainer_kwargs: dict, weight_averaging: bool | None) -> dict:
    """``trainer_kwargs`` with an :class:`~sctrilemma.train.ExponentialWeightAverage` of the weights where wanted.

    ``weight_averaging`` ``None`` follows the preset; ``True`` averages with either preset. A
    :class:`~lightning.pytorch.callbacks.WeightAveraging` among the user's callbacks is kept instead.
    """
    wanted = WEIGHT_AVERAGING[preset] if weight_averaging is None else weight_averaging
    callbacks = list(trainer_kwargs.get("callbacks") or [])
    if not wanted or any(isinstance(c, WeightAveraging) for c in callbacks):
        return trainer_kwargs
    return {**trainer_kwargs, "callbacks": [*callbacks, ExponentialWeightAverage()]}


# Cells per step when ``train(batch_size=None)``: the paper's 256 per GPU; the small preset takes more, cheaper
# steps, which learn more per second on a CPU (docs/user_guide.md).
BATCH_SIZES: dict[str, int] = {"paper": 256, "small": 64}


def training_length(
    preset: str, n_obs: int, max_epochs: int | None, max_steps: int | None, steps_per_epoch: int = 1
) -> tuple[int | None, int | None]:
    """``train()``'s ``(max_epochs, max_steps)`` as given, or the preset's default when it sets neither.

    The small preset's default is ``DEFAULT_STEPS`` or one pass over the training cells (``steps_per_epoch``),
    whichever is longer; the paper preset's is scVI's epoch heuristic for ``n_obs`` cells, capped.
    """
    if max_epochs is not None or max_steps is not None:
        return max_epochs, max_steps
    if DEFAULT_STEPS[preset] is not None:
        return None, max(DEFAULT_STEPS[preset], steps_per_epoch)
    return get_max_epochs_heuristic(n_obs, epochs_cap=DEFAULT_EPOCHS_CAP), None


def progress_bar_kwargs(trainer_kwargs: dict) -> dict:
    """``trainer_kwargs`` with a progress bar of seconds under ``max_time``, in place of scvi-tools' bar of epochs.

    The bar is :class:`~sctrilemma.train.TimeBudgetProgressBar`; a user who asked for Lightning's own bar
    (``simple_progress_bar=False``) or none keeps it.
    """
    if trainer_kwargs.get("max_time") is None or not trainer_kwargs.get("enable_progress_bar", True):
        return trainer_kwargs
    if trainer_kwargs.get("simple_progress_bar") is False:  # the user chose Lightning's own bar
        return trainer_kwargs
    callbacks = [*(trainer_kwargs.get("callbacks") or []), TimeBudgetProgressBar()]
    return {**trainer_kwargs, "simple_progress_bar": False, "callbacks": callbacks}


def recipe_trainer_kwargs(trainer_kwargs: dict, uses_cuda: bool) -> dict:
    """``trainer_kwargs`` with the paper's recipe filled in where the user left it unset.

    Gradients are clipped at norm 1.0; on a CUDA device with bf16 support, training runs in Lightning's
    ``"bf16-mixed"`` precision. CPU training stays fp32 and, unless the user set torch's thread count, trains at
    the fastest of a few thread counts, measured as it goes (:class:`~sctrilemma.train.CpuThreadTuner`).
    """
    recipe = {"gradient_clip_val": 1.0}
    if uses_cuda and torch.cuda.is_bf16_supported():
        recipe["precision"] = "bf16-mixed"
    trainer_kwargs = {**recipe, **trainer_kwargs}
    callbacks = list(trainer_kwargs.get("callbacks") or [])
    if not uses_cuda and not user_chose_threads() and not any(isinstance(c, CpuThreadTuner) for c in callbacks):
        trainer_kwargs["callbacks"] = [*callbacks, CpuThreadTuner()]
    return trainer_kwargs


def resolve_preset(preset: str, overrides: dict[str, int | float | None]) -> dict[str, int | float | None]:
    """The preset's sizes with every non-``None`` override applied."""
    if preset not in PRESETS:
        raise ValueError(f"`preset` must be one of {sorted(PRESETS)}, got {preset!r}.")
    return {**PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}}
