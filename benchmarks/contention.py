"""Training speed on a shared CPU: idle, and beside other CPU-heavy processes, SCTrilemma and scVI side by side.

For each condition (no competitor, one busy process, two busy processes), each trainer runs in a fresh process for
a fixed wall-clock budget on the shipped example and reports its steps and cells per second:

- ``sctrilemma``: the small preset as a user runs it (torch's default threads, tuned by ``CpuThreadTuner``);
- ``sctrilemma_pinned``: the same with ``OMP_NUM_THREADS`` set to the machine's cores, which the package leaves
  alone (the behaviour before the tuner);
- ``scvi``: scVI with its defaults, the same threads.

Usage: ``python benchmarks/contention.py [--seconds 30] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TRAINERS = ("sctrilemma", "sctrilemma_pinned", "scvi")
BUSY_LOOP = "while True: pass"


def child(trainer: str, seconds: float) -> dict:
    """Train for ``seconds`` of wall clock; steps, cells per second and the thread counts used."""
    from datetime import timedelta

    import scvi
    import torch

    from sctrilemma import SCTrilemma
    from sctrilemma.data import load_example
    from sctrilemma.train import CpuThreadTuner

    scvi.settings.seed = 0
    adata = load_example()
    if trainer == "scvi":
        scvi.model.SCVI.setup_anndata(adata)
        model, batch_size = scvi.model.SCVI(adata), 128
    else:
        SCTrilemma.setup_anndata(adata, donor_key="donor")
        model, batch_size = SCTrilemma(adata, preset="small"), 64
    start = time.perf_counter()
    model.train(max_epochs=10_000, max_time=timedelta(seconds=seconds), enable_progress_bar=False)
    elapsed = time.perf_counter() - start
    steps = int(model.trainer.global_step)
    tuner = [callback for callback in model.trainer.callbacks if isinstance(callback, CpuThreadTuner)]
    return {
        "trainer": trainer,
        "threads_at_start": torch.get_num_threads(),
        "thread_choices": tuner[0].history if tuner else None,
        "steps": steps,
        "seconds": elapsed,
        "steps_per_s": steps / elapsed,
        "cells_per_s": steps * batch_size / elapsed,
    }


def run_condition(n_busy: int, seconds: float) -> list[dict]:
    """Each trainer beside ``n_busy`` busy-looping processes."""
    busy = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(n_busy)]
    try:
        rows = []
        for trainer in TRAINERS:
            env = dict(os.environ)
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                env.pop(name, None)
            if trainer == "sctrilemma_pinned":
                env["OMP_NUM_THREADS"] = str(os.cpu_count())
            run = subprocess.run(
                [sys.executable, __file__, "--child", trainer, "--seconds", str(seconds)],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            row = json.loads(run.stdout.strip().splitlines()[-1])
            row["busy_processes"] = n_busy
            rows.append(row)
            print(
                f"busy {n_busy}  {trainer:18s} {row['steps_per_s']:6.2f} steps/s  {row['cells_per_s']:7.0f} cells/s"
                f"  threads {row['threads_at_start']}  choices {row['thread_choices']}",
                flush=True,
            )
        return rows
    finally:
        for process in busy:
            process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/speed/contention.json"))
    parser.add_argument("--child", choices=TRAINERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.seconds)))
        return
    rows = [row for n_busy in (0, 1, 2) for row in run_condition(n_busy, args.seconds)]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"command": "python benchmarks/contention.py", "cores": os.cpu_count(), "rows": rows}, indent=2)
    )


if __name__ == "__main__":
    main()
