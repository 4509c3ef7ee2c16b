"""The presets, one table of settings each, and how :meth:`~sctrilemma.SCTrilemma.train` hands them to scvi-tools.

Besides the table: the trainer keywords of the training recipe, a CPU batch that fits the memory available, and
scvi-tools' runner without files left behind.

``PRESETS[name]`` holds three groups, each overridden where the user passes the same key:

- ``"model"``: :class:`~sctrilemma.SCTrilemma`'s keyword arguments, the module's sizes and settings;
- ``"plan"``: ``train(plan_kwargs=...)``, the optimisation of :class:`~sctrilemma.train.SCTrilemmaTrainingPlan`;
- ``"train"``: :meth:`~sctrilemma.SCTrilemma.train`'s arguments and scvi-tools trainer keywords.

An argument left at ``None`` takes the preset's value; no setting uses ``None`` for a value of its own.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import warnings
from typing import TYPE_CHECKING, Any, Literal

import torch
from lightning.pytorch.callbacks import WeightAveraging
from scvi import settings
from scvi.model._utils import get_max_epochs_heuristic, use_distributed_sampler
from scvi.train import TrainRunner

from sctrilemma.train._callbacks import ExponentialWeightAverage, ReportedEarlyStopping, TimeBudgetProgressBar
from sctrilemma.train._threads import CpuThreadTuner, user_chose_threads

if TYPE_CHECKING:
    from collections.abc import Mapping

Preset = Literal["paper", "small"]

# Each preset's settings; documented where sctrilemma.model exports it.
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # The paper's model and recipe (Appendix B, "Architecture settings" and "Training").
    "paper": {
        "model": {
            "n_hidden": 512,
            "n_latent_tokens": 64,
            "crop_size": 4096,
            "n_encoder_layers": 3,
            "n_decoder_layers": 3,
            "n_heads": 8,
            "dropout_rate": 0.1,
            "ffn_multiplier": 4.0,
            "n_decoder_targets": "crop",
            "posterior_logvar_init": 0.0,
            "gene_embedding_init": "normal",
            "decoder_gene_offset": False,
            "min_depth_fraction": 1.0,
            "embedding_depth_quantile": "observed",
            "encoder_genes": "all",
            "embedding_centred_on_prior": False,
        },
        "plan": {"lr": 2e-4, "max_lr_warmup_steps": 1250, "max_kl_warmup_steps": 2500},
        "train": {
            "batch_size": 256,
            "max_epochs_cap": 50,
            "early_stopping": False,
            "early_stopping_monitor": "elbo_validation",
            "early_stopping_patience": 45,
            "weight_averaging": False,
            "gradient_clip_val": 1.0,
        },
    },
    # The same architecture sized and trained for a CPU in minutes; docs/user_guide.md, "Where the small preset
    # departs from the paper", gives the reason and the figure for each departure.
    "small": {
        "model": {
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
        "plan": {
            "lr": 5e-3,
            "max_lr_warmup_steps": 50,
            "max_kl_warmup_steps": 100,
            "decoder_gene_offset_lr_scale": 2.0,
            "encoder_lr_steps": 1200,
        },
        "train": {
            "batch_size": 64,
            "max_steps": 1200,
            "early_stopping": True,
            "early_stopping_monitor": "reconstruction_loss_validation",
            "early_stopping_patience": 10,
            "weight_averaging": True,
            "gradient_clip_val": 1.0,
        },
    },
}

EARLY_STOPPING_KEYS = ("early_stopping_monitor", "early_stopping_patience", "early_stopping_min_delta",
                       "early_stopping_mode")  # fmt: skip
# scvi-tools' logging interval in steps; Lightning warns when an epoch is shorter, so short epochs log once each.
LOG_EVERY_N_STEPS = 10


def preset_settings(preset: str) -> dict[str, dict[str, Any]]:
    """The preset's table, or a ``ValueError`` naming the presets."""
    if preset not in PRESETS:
        raise ValueError(f"`preset` must be one of {sorted(PRESETS)}, got {preset!r}.")
    return PRESETS[preset]


def model_settings(preset: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The preset's ``"model"`` group with every non-``None`` value of ``given`` applied."""
    return {**preset_settings(preset)["model"], **{key: value for key, value in given.items() if value is not None}}


def training_length(
    preset: str, n_obs: int, max_epochs: int | None, max_steps: int | None, steps_per_epoch: int = 1
) -> tuple[int | None, int | None]:
    """``(max_epochs, max_steps)`` as given, or the preset's length where neither is given."""
    if max_epochs is not None or max_steps is not None:
        return max_epochs, max_steps
    table = preset_settings(preset)["train"]
    if "max_steps" in table:
        return None, max(table["max_steps"], steps_per_epoch)
    return get_max_epochs_heuristic(n_obs, epochs_cap=table["max_epochs_cap"]), None


def trainer_arguments(
    preset: str,
    trainer_kwargs: dict,
    *,
    early_stopping: bool | None,
    weight_averaging: bool | None,
    uses_cuda: bool,
    has_validation_cells: bool,
) -> dict:
    """scvi-tools trainer keywords: the user's, with the preset's recipe where the user left a setting unset.

    - Gradients clipped at the preset's norm; on a CUDA device with bf16, Lightning's ``"bf16-mixed"`` precision.
      CPU training stays fp32 and, unless the user set torch's thread count, trains at the fastest of a few thread
      counts (:class:`~sctrilemma.train.CpuThreadTuner`).
    - Early stopping (``early_stopping`` ``None``: as the preset): :class:`~sctrilemma.train.ReportedEarlyStopping`
      on the validation cells every epoch, with scvi-tools' ``early_stopping_*`` keywords, the preset's by default.
      It logs one line when it ends training and, unlike a strict stop, lets a run shorter than an epoch train on.
      The preset's stop is left out where no cells are held out for validation; scvi-tools refuses a stop the user
      asked for there.
    - A moving average of the weights (``weight_averaging`` ``None``: as the preset), unless the user passed a
      :class:`~lightning.pytorch.callbacks.WeightAveraging`.
    - Under ``max_time``, a progress bar of seconds (:class:`~sctrilemma.train.TimeBudgetProgressBar`).
    """
    table = preset_settings(preset)["train"]
    kwargs = {"gradient_clip_val": table["gradient_clip_val"], **trainer_kwargs}
    if uses_cuda and torch.cuda.is_bf16_supported():
        kwargs.setdefault("precision", "bf16-mixed")
    callbacks = list(kwargs.pop("callbacks", None) or [])
    averaged = table["weight_averaging"] if weight_averaging is None else weight_averaging
    if averaged and not any(isinstance(callback, WeightAveraging) for callback in callbacks):
        callbacks.append(ExponentialWeightAverage())
    if not uses_cuda and not user_chose_threads() and not any(isinstance(c, CpuThreadTuner) for c in callbacks):
        callbacks.append(CpuThreadTuner())
    stop = {key: kwargs.pop(key, table[key]) for key in EARLY_STOPPING_KEYS if key in kwargs or key in table}
    # The preset's stop needs validation cells; one the user asked for is checked by scvi-tools' runner instead.
    if early_stopping or (early_stopping is None and table["early_stopping"] and has_validation_cells):
        callbacks.append(
            ReportedEarlyStopping(
                monitor=stop["early_stopping_monitor"],
                patience=stop["early_stopping_patience"],
                min_delta=stop.get("early_stopping_min_delta", 0.0),
                mode=stop.get("early_stopping_mode", "min"),
                strict=False,
            )
        )
        kwargs.setdefault("check_val_every_n_epoch", 1)
    timed = kwargs.get("max_time") is not None and kwargs.get("enable_progress_bar", True)
    if timed and kwargs.get("simple_progress_bar") is not False:  # False: the user chose Lightning's own bar
        callbacks.append(TimeBudgetProgressBar())
        kwargs["simple_progress_bar"] = False
    if callbacks:
        kwargs["callbacks"] = callbacks
    return kwargs


def training_arguments(
    preset: str,
    *,
    n_obs: int,
    n_training_cells: int,
    batch_size: int,
    max_epochs: int | None,
    max_steps: int | None,
    plan_kwargs: dict | None,
    trainer_kwargs: dict,
    **recipe: Any,
) -> dict:
    """Keywords of scvi-tools' ``UnsupervisedTrainingMixin.train``: the user's arguments over the preset's.

    ``recipe`` is :func:`trainer_arguments`' keywords.
    """
    steps_per_epoch = max(1, math.ceil(n_training_cells / batch_size))
    max_epochs, max_steps = training_length(preset, n_obs, max_epochs, max_steps, steps_per_epoch)
    kwargs = trainer_arguments(preset, trainer_kwargs, **recipe)
    if max_steps is not None:
        max_epochs = math.ceil(max_steps / steps_per_epoch)
        kwargs["max_steps"] = max_steps
    kwargs.setdefault("log_every_n_steps", min(LOG_EVERY_N_STEPS, steps_per_epoch))
    plan_kwargs = plan_arguments(preset, plan_kwargs)
    return {"max_epochs": max_epochs, "batch_size": batch_size, "plan_kwargs": plan_kwargs, **kwargs}


def plan_arguments(preset: str, plan_kwargs: dict | None) -> dict:
    """The training plan's keywords: the preset's ``"plan"`` group with the user's non-``None`` values applied."""
    return {**preset_settings(preset)["plan"], **{k: v for k, v in (plan_kwargs or {}).items() if v is not None}}


# ------------------------------------------------------------------ memory of a CPU training step
# A training step keeps each block's activations for the backward pass: the encoder's per gene token, the decoder's
# per reconstructed gene, for every cell of the batch. Their sum, in units of one float per feature, times a byte
# count fitted to measured peaks (benchmarks/training_memory.py), estimates what a batch adds to the process;
# gradients and AdamW's moments add a fixed share. The rise of peak RSS per cell, over the units per cell, was 21-24
# bytes for both presets (benchmarks/RESULTS.md, "Memory").
BYTES_PER_UNIT = 24.0
# Share of the available memory a training batch may take; the rest covers the data, the model and the allocator.
MEMORY_SHARE = 0.6


def training_units_per_cell(module: torch.nn.Module, n_genes: int) -> tuple[int, int]:
    """Activation units one cell adds to a training step: ``(encoder, decoder)``.

    The encoder holds ``crop_size`` gene tokens of width ``d`` per block; the decoder holds each reconstructed gene's
    query (width ``d``) and feed-forward hidden layer per block, for the crop (the paper) or ``n_decoder_targets``
    sampled genes.
    """
    width = module.n_hidden
    ffn_width = module.decoder.blocks[0].ffn.proj_out.in_features
    tokens = min(module.crop_size, n_genes)
    targets = tokens if module.n_decoder_targets == "crop" else min(module.n_decoder_targets, n_genes)
    return len(module.encoder.blocks) * tokens * width, len(module.decoder.blocks) * targets * (width + ffn_width)


def training_bytes_per_cell(module: torch.nn.Module, n_genes: int) -> float:
    """Estimated peak bytes one cell adds to a CPU training step."""
    return BYTES_PER_UNIT * sum(training_units_per_cell(module, n_genes))


def optimizer_bytes(module: torch.nn.Module) -> int:
    """Bytes that training adds whatever the batch: each parameter's gradient and AdamW's two moments (fp32)."""
    return 3 * 4 * sum(parameter.numel() for parameter in module.parameters() if parameter.requires_grad)


def available_memory_bytes() -> int | None:
    """Memory the system can give this process now (``MemAvailable`` on Linux), or ``None`` where unknown."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def fit_batch_to_memory(module: torch.nn.Module, n_genes: int, batch_size: int, preset: str) -> int:
    """``batch_size``, or the largest batch whose CPU training step fits the memory available, with a warning.

    Raises
    ------
    MemoryError
        If not even one cell fits, before any training.
    """
    available = available_memory_bytes()
    if available is None:
        return batch_size
    per_cell = training_bytes_per_cell(module, n_genes)
    budget = MEMORY_SHARE * available - optimizer_bytes(module)
    if per_cell * batch_size <= budget:
        return batch_size
    fitting = int(budget // per_cell)
    gib = 2**30
    if fitting < 1:
        raise MemoryError(
            f"One cell of this {preset!r} model needs about {per_cell / gib:.1f} GiB to train on the CPU and "
            f"{available / gib:.1f} GiB are available. Train on a GPU, or use `SCTrilemma(adata, preset='small')`."
        )
    warnings.warn(
        f"A training batch of {batch_size} cells of this {preset!r} model would need about "
        f"{per_cell * batch_size / gib:.1f} GiB on the CPU and {available / gib:.1f} GiB are available: training with "
        f"batch_size={fitting} instead. Pass `batch_size` to choose it, `check_memory=False` to keep yours, or use "
        "preset='small', sized for CPUs.",
        UserWarning,
        stacklevel=settings.warnings_stacklevel,
    )
    return fitting


class SCTrilemmaTrainRunner(TrainRunner):
    """:class:`~scvi.train.TrainRunner` that keeps DDP training history in a temporary directory.

    Under a DDP strategy scvi-tools' trainer writes ``lightning_logs/version_1/history.pkl`` into the working
    directory so that rank 0's history reaches the model. Unless the user passes ``logger``, ``log_save_dir`` or
    ``default_root_dir``, this runner points it at a temporary directory, removed after training.
    """

    def __init__(self, *args: Any, trainer_config: dict | None = None, **trainer_kwargs: Any) -> None:
        self._temporary_log_dir = None
        requested = {**(trainer_config or {}), **trainer_kwargs}
        chosen = any(requested.get(key) is not None for key in ("logger", "log_save_dir", "default_root_dir"))
        if use_distributed_sampler(requested.get("strategy")) and not chosen:
            self._temporary_log_dir = tempfile.mkdtemp(prefix="sctrilemma-history-")
            trainer_kwargs["log_save_dir"] = self._temporary_log_dir
        super().__init__(*args, trainer_config=trainer_config, **trainer_kwargs)

    def __call__(self):
        """Train, then remove the temporary history directory."""
        try:
            return super().__call__()
        finally:
            if self._temporary_log_dir is not None:
                shutil.rmtree(self._temporary_log_dir, ignore_errors=True)
