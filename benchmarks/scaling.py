"""Embedding cost against the number of cells, the crop size and the expressed genes per cell.

Synthetic cells, fp32 (the default on CPU). Time should grow linearly with cells at flat peak memory
(batches are encoded a bounded number of tokens at a time) and with ``min(crop size, expressed genes)``.

    python benchmarks/scaling.py --json benchmarks/output/scaling.json
    python benchmarks/scaling.py --quick
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import torch
from _speed import (
    N_SYNTHETIC_GENES,
    OUTPUT,
    encoder_flops,
    median_seconds,
    paired_models,
    peak_memory_mb,
    print_table,
    synthetic_counts,
    write_json,
)

if TYPE_CHECKING:
    from sctrilemma.module import SCTrilemmaModule


def measure(module: SCTrilemmaModule, x: torch.Tensor, batch_size: int, repeats: int, **labels) -> dict:
    """Cells/s, useful GFLOP/s and peak memory of embedding ``x`` in batches."""
    batches = x.split(batch_size)

    def embed() -> None:
        with torch.inference_mode():
            for b in batches:
                module.inference(b)

    seconds = median_seconds(embed, repeats)
    return {
        **labels,
        "n_cells": x.shape[0],
        "cells_per_s": x.shape[0] / seconds,
        "ms_per_cell": 1e3 * seconds / x.shape[0],
        "gflops": encoder_flops(x, module) / seconds / 1e9,
        "peak_memory_mb": peak_memory_mb(embed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small preset, fewer points (about two minutes)")
    parser.add_argument("--json", default=str(OUTPUT / "scaling.json"), help="write the results to this JSON file")
    args = parser.parse_args()
    preset = "small" if args.quick else "paper"
    batch_size, repeats = 32, 1 if args.quick else 2
    module, _ = paired_models(preset, N_SYNTHETIC_GENES)
    module.precision = "fp32"
    unit = 64 if args.quick else 8

    cells = [measure(module, synthetic_counts(n, N_SYNTHETIC_GENES, 2000), batch_size, repeats, axis="cells")
             for n in (unit, 4 * unit, 16 * unit)]  # fmt: skip
    print_table(cells, list(cells[0]))

    crops = []
    x = synthetic_counts(2 * unit, N_SYNTHETIC_GENES, 6000)
    for crop_size in (512, 1024, 2048, 4096):
        module.crop_size = crop_size
        crops.append(measure(module, x, batch_size, repeats, axis="crop_size", crop_size=crop_size))
    module.crop_size = 4096
    print_table(crops, list(crops[0]))

    expressed = [
        measure(module, synthetic_counts(2 * unit, N_SYNTHETIC_GENES, n), batch_size, repeats,
                axis="expressed_genes", expressed_genes=n)
        for n in (250, 500, 1000, 2000, 4000)
    ]  # fmt: skip
    print_table(expressed, list(expressed[0]))
    write_json(args.json, {"preset": preset, "threads": torch.get_num_threads(), "cells": cells,
                           "crop_size": crops, "expressed_genes": expressed})  # fmt: skip


if __name__ == "__main__":
    main()
