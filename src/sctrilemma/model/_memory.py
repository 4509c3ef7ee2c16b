"""Memory of a CPU training step, and a batch size that fits the memory available.

A training step keeps each block's activations for the backward pass: the encoder's per gene token, the decoder's
per reconstructed gene, for every cell of the batch. Their sum, in units of one float per feature, times a byte
count fitted to measured peaks (``benchmarks/training_memory.py``), estimates what a batch adds to the process;
gradients and AdamW's moments add a fixed share.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from scvi import settings

if TYPE_CHECKING:
    import torch

# Bytes of peak memory per activation unit: the rise of peak RSS per cell in CPU training, over the units per cell,
# was 21-24 for both presets (benchmarks/training_memory.py; benchmarks/RESULTS.md, "Memory").
BYTES_PER_UNIT = 24.0
# Share of the available memory a training batch may take; the rest covers the data, the model and the allocator.
MEMORY_SHARE = 0.6


def training_units_per_cell(module: torch.nn.Module, n_genes: int) -> tuple[int, int]:
    """Activation units one cell adds to a training step: ``(encoder, decoder)``.

    The encoder holds ``crop_size`` gene tokens of width ``d`` per block; the decoder holds each reconstructed gene's
    query (width ``d``) and feed-forward hidden layer per block. It reconstructs the crop (the paper) or
    ``n_decoder_targets`` sampled genes (the small preset).
    """
    width = module.n_hidden
    ffn_width = module.decoder.blocks[0].ffn.proj_out.in_features
    tokens = min(module.crop_size, n_genes)
    targets = tokens if module.n_decoder_targets is None else min(module.n_decoder_targets, n_genes)
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
