"""Shared set-up of the speed benchmarks: paired models, count data, timing, peak memory and FLOP counts."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import re
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from sctrilemma.benchmark._reference import UpstreamStyleVAE
from sctrilemma.io._upstream import upstream_to_module_state
from sctrilemma.model import PRESETS
from sctrilemma.module import SCTrilemmaModule

if TYPE_CHECKING:
    from collections.abc import Callable

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
OUTPUT = Path(__file__).resolve().parent / "output"  # raw output, git-ignored
if not SHARED_DATA.exists():
    SHARED_DATA = Path("/work/shared/data")
REAL_DATASETS = {"cellbench": "cellbench_lung_celllines.h5ad", "kang": "kang2018_pbmc_ctrl.h5ad"}
N_SYNTHETIC_GENES = 27952  # the CellBench vocabulary size
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def paired_models(preset: str, n_input: int, seed: int = 0) -> tuple[SCTrilemmaModule, UpstreamStyleVAE]:
    """Our module and the plain upstream-style reference with the same random weights (eval mode).

    Norm scales, biases and BatchNorm statistics are randomised too, so no part of the function is trivial.
    """
    sizes = PRESETS[preset]["model"]
    torch.manual_seed(seed)
    reference = UpstreamStyleVAE(
        n_input,
        n_hidden=sizes["n_hidden"],
        n_latent_tokens=sizes["n_latent_tokens"],
        n_encoder_layers=sizes["n_encoder_layers"],
        n_decoder_layers=sizes["n_decoder_layers"],
        n_heads=sizes["n_heads"],
        dropout_rate=sizes["dropout_rate"],
        with_prior=False,
    )
    with torch.no_grad():
        for name, tensor in reference.state_dict().items():
            if name.endswith("running_var"):
                tensor.uniform_(0.5, 2.0)
            elif "norm" in name and name.endswith("weight"):
                tensor.uniform_(0.7, 1.3)
            elif name.endswith("bias") or name.endswith("running_mean"):
                tensor.normal_(0.0, 0.2)
    state, config = upstream_to_module_state(reference.state_dict())
    module = SCTrilemmaModule(
        **config, n_heads=sizes["n_heads"], crop_size=sizes["crop_size"], dropout_rate=sizes["dropout_rate"]
    )
    module.load_state_dict(state, strict=True)
    return module.eval(), reference.eval()


def synthetic_counts(n_cells: int, n_genes: int, n_expressed: int, seed: int = 0) -> torch.Tensor:
    """Dense counts ``(n_cells, n_genes)`` with exactly ``n_expressed`` expressed genes per cell."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n_cells, n_genes), dtype=np.float32)
    for row in x:
        genes = rng.choice(n_genes, size=n_expressed, replace=False)
        row[genes] = rng.geometric(0.4, size=n_expressed)
    return torch.from_numpy(x)


def real_counts(name: str, n_cells: int, seed: int = 0) -> torch.Tensor:
    """Dense raw counts of ``n_cells`` random cells of a shared real dataset."""
    import anndata as ad

    adata = ad.read_h5ad(SHARED_DATA / REAL_DATASETS[name])
    cells = np.sort(np.random.default_rng(seed).choice(adata.n_obs, size=min(n_cells, adata.n_obs), replace=False))
    return torch.from_numpy(adata.X[cells].toarray().astype(np.float32))


def encoder_flops(x: torch.Tensor, module: SCTrilemmaModule) -> float:
    """Useful encoder FLOPs, the issue's count ``(4 n d^2 + 4 K n d)`` per block over the cells' real tokens."""
    n = (x > 0).sum(1).clamp(max=module.crop_size).double()
    d, k = module.n_hidden, module.n_latent_tokens
    return float(len(module.encoder.blocks) * (4 * n * d * d + 4 * k * n * d).sum())


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn`` over ``repeats`` calls after one warm-up call."""
    return paired_median_seconds({"fn": fn}, repeats)["fn"]


def paired_round_seconds(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Wall time of each function in every round, run in turn so load changes hit all alike, after one warm-up call."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def paired_median_seconds(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall time of each function over :func:`paired_round_seconds`'s rounds."""
    return {name: statistics.median(values) for name, values in paired_round_seconds(fns, repeats).items()}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return int(re.search(rf"{field}:\s+(\d+)", status.read()).group(1))


def peak_memory_mb(fn: Callable[[], object]) -> float:
    """Peak resident memory (MB) that one call of ``fn`` adds.

    Freed heap memory is first returned to the OS (``malloc_trim``), so memory kept from earlier runs
    cannot hide new allocations; then the kernel's high-water mark is reset (``/proc/self/clear_refs``)
    and read back after the call.
    """
    gc.collect()
    _LIBC.malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    baseline = _status_kib("VmRSS")
    fn()
    return (_status_kib("VmHWM") - baseline) / 1024


def write_json(path: str | None, payload: dict) -> None:
    """Write ``payload`` to ``path`` (if given) as indented JSON."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {path}")


def print_table(rows: list[dict], columns: list[str]) -> None:
    """Print ``rows`` as a Markdown table."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        cells = [f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c]) for c in columns]
        print("| " + " | ".join(cells) + " |")
