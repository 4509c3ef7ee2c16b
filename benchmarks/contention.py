"""Training speed on a shared CPU: idle, and beside other CPU-heavy processes, SCTrilemma and scVI side by side.

For each condition (no competitor, one busy process, two busy processes), each trainer runs in a fresh process for
a fixed wall-clock budget on the shipped example and reports its steps and cells per second:

- ``sctrilemma``: the small preset as a user runs it (torch's default threads, tuned by ``CpuThreadTuner``);
- ``sctrilemma_pinned``: the same with ``OMP_NUM_THREADS`` set to the machine's cores, which the package leaves
  alone (the behaviour before the tuner);
- ``scvi``: scVI with its defaults, the same threads.

Then the same for inference: ``get_latent_representation`` and ``get_normalized_expression(library_size=1e4)`` of the
3,000 cells, with the shipped reference (tuned and pinned) and with an scVI model trained beforehand on an idle
machine.

Usage: ``python benchmarks/contention.py [--seconds 30] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent / "output"  # raw output, git-ignored
TRAINERS = ("sctrilemma", "sctrilemma_pinned", "scvi")
INFERENCE = ("sctrilemma_infer", "sctrilemma_infer_pinned", "scvi_infer")
PINNED = ("sctrilemma_pinned", "sctrilemma_infer_pinned")
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


def inference_child(runner: str, scvi_dir: Path) -> dict:
    """Seconds to embed the example and to decode its normalised expression."""
    import scvi
    import torch

    from sctrilemma import SCTrilemma
    from sctrilemma.data import example_reference_dir, load_example

    adata = load_example()
    if runner == "scvi_infer":
        model = scvi.model.SCVI.load(str(scvi_dir), adata=adata)
    else:
        model = SCTrilemma.load_query_data(adata, example_reference_dir())
    threads = torch.get_num_threads()
    start = time.perf_counter()
    model.get_latent_representation()
    embed_s = time.perf_counter() - start
    start = time.perf_counter()
    model.get_normalized_expression(library_size=1e4, return_numpy=True)
    return {
        "trainer": runner,
        "threads_at_start": threads,
        "embed_s": embed_s,
        "normalized_expression_s": time.perf_counter() - start,
    }


def train_scvi_reference(directory: Path) -> None:
    """An scVI model of the example for the inference runs, trained before any busy process starts."""
    import scvi

    from sctrilemma.data import load_example

    scvi.settings.seed = 0
    adata = load_example()
    scvi.model.SCVI.setup_anndata(adata)
    model = scvi.model.SCVI(adata)
    model.train(max_epochs=20, enable_progress_bar=False)
    model.save(str(directory), overwrite=True)


def run_condition(n_busy: int, seconds: float, runners: tuple[str, ...], scvi_dir: Path) -> list[dict]:
    """Each trainer beside ``n_busy`` busy-looping processes."""
    busy = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(n_busy)]
    try:
        rows = []
        for trainer in runners:
            env = dict(os.environ)
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                env.pop(name, None)
            if trainer in PINNED:
                env["OMP_NUM_THREADS"] = str(os.cpu_count())
            run = subprocess.run(
                [sys.executable, __file__, "--child", trainer, "--seconds", str(seconds), "--scvi-dir", str(scvi_dir)],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            row = json.loads(run.stdout.strip().splitlines()[-1])
            row["busy_processes"] = n_busy
            rows.append(row)
            if trainer in INFERENCE:
                speed = f"embed {row['embed_s']:6.2f} s  normalised expression {row['normalized_expression_s']:6.2f} s"
            else:
                speed = f"{row['steps_per_s']:6.2f} steps/s  {row['cells_per_s']:7.0f} cells/s  {row['thread_choices']}"
            print(f"busy {n_busy}  {trainer:24s} {speed}", flush=True)
        return rows
    finally:
        for process in busy:
            process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path, default=OUTPUT / "contention.json")
    parser.add_argument("--child", choices=TRAINERS + INFERENCE, help=argparse.SUPPRESS)
    parser.add_argument("--scvi-dir", type=Path, default=Path("scvi_contention_model"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = (
            inference_child(args.child, args.scvi_dir) if args.child in INFERENCE else child(args.child, args.seconds)
        )
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory() as scratch:
        scvi_dir = Path(scratch) / "scvi"
        train_scvi_reference(scvi_dir)
        rows = [
            row
            for runners in (TRAINERS, INFERENCE)
            for n_busy in (0, 1, 2)
            for row in run_condition(n_busy, args.seconds, runners, scvi_dir)
        ]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"command": "python benchmarks/contention.py", "cores": os.cpu_count(), "rows": rows}, indent=2)
    )


if __name__ == "__main__":
    main()
