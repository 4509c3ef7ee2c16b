"""How close embedding gets to this machine's matrix-multiplication throughput.

Measures fp32 and bf16 GEMM throughput (the issue's 4096 x 2048 x 2048 and a shape like the model's
context projection), then embeds synthetic cells (2,000 expressed genes) at the paper's and the small
preset and reports cells/s, useful encoder GFLOP/s (``(4 n d^2 + 4 K n d)`` per block, ``n`` real tokens),
the fraction of the GEMM roofline of the same precision, and the peak memory of one batch. Both GEMM and
embedding take the best of several runs, so that other processes on the machine affect them alike.

    python benchmarks/roofline.py --json benchmarks/output/roofline.json
    python benchmarks/roofline.py --quick
"""

from __future__ import annotations

import argparse
import time

import torch
from _speed import (
    N_SYNTHETIC_GENES,
    OUTPUT,
    encoder_flops,
    paired_models,
    peak_memory_mb,
    print_table,
    synthetic_counts,
    write_json,
)
from vs_reference import cpu_supports_bf16


def gemm_gflops(m: int, k: int, n: int, dtype: torch.dtype, seconds: float) -> float:
    """Best GFLOP/s of ``(m, k) @ (k, n)`` in ``dtype`` over about ``seconds``."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    torch.mm(a, b)
    best, deadline = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * m * k * n / best / 1e9


def timed(fn) -> float:
    """Wall time of one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer cells and repeats (about two minutes)")
    parser.add_argument("--json", default=str(OUTPUT / "roofline.json"), help="write the results to this JSON file")
    args = parser.parse_args()
    seconds = 2.0 if args.quick else 6.0
    bf16 = cpu_supports_bf16()
    gemm = {
        "gemm_gflops_fp32": gemm_gflops(4096, 2048, 2048, torch.float32, seconds),
        "gemm_gflops_bf16": gemm_gflops(4096, 2048, 2048, torch.bfloat16, seconds) if bf16 else float("nan"),
        "gemm_model_shape_gflops_fp32": gemm_gflops(16384, 512, 1024, torch.float32, seconds),
        "gemm_model_shape_gflops_bf16": gemm_gflops(16384, 512, 1024, torch.bfloat16, seconds)
        if bf16
        else float("nan"),
    }
    print(f"torch threads {torch.get_num_threads()}, CPU bf16: {bf16}")
    print_table([gemm], list(gemm))

    rows = []
    for preset, n_cells, batch_size in (
        ("paper", 32 if args.quick else 96, 32),
        ("small", 256 if args.quick else 1024, 128),
    ):
        x = synthetic_counts(n_cells, N_SYNTHETIC_GENES, 2000)
        module, _ = paired_models(preset, x.shape[1])
        flops = encoder_flops(x, module)
        batches = x.split(batch_size)
        for precision in ("fp32", "bf16") if bf16 else ("fp32",):
            module.precision = precision

            def embed(cells=batches, module=module) -> None:
                with torch.inference_mode():
                    for b in cells:
                        module.inference(b)

            # Best of several runs, like the GEMM figures, so both sides see the least loaded moment.
            embed()
            seconds_per_run = min(timed(embed) for _ in range(1 if args.quick else 3))
            roof = gemm[f"gemm_gflops_{precision}"]
            rows.append(
                {
                    "preset": preset,
                    "precision": precision,
                    "batch_size": batch_size,
                    "embed_cells_per_s": n_cells / seconds_per_run,
                    "embed_gflops": flops / seconds_per_run / 1e9,
                    "roofline_fraction": flops / seconds_per_run / 1e9 / roof,
                    "peak_memory_mb": peak_memory_mb(lambda first=batches[:1], run=embed: run(first)),
                }
            )
            print_table(rows[-1:], list(rows[-1]))
    print_table(rows, list(rows[0]))
    by_preset: dict[str, dict] = {}
    for row in rows:  # fp32 figures at the top level of each preset, bf16 under "bf16"
        entry = by_preset.setdefault(row["preset"], {})
        (entry if row["precision"] == "fp32" else entry.setdefault(row["precision"], {})).update(row)
    write_json(args.json, {"threads": torch.get_num_threads(), **gemm, **by_preset, "rows": rows})


if __name__ == "__main__":
    main()
