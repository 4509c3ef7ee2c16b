"""Peak memory of CPU training steps against the batch size, for both presets, each run in a fresh process.

For each preset, data set and batch size, a child process builds the model, runs two training steps on the CPU and
reports how far training raised the process's peak resident memory (``ru_maxrss``) above its peak before training,
next to :func:`sctrilemma.model._presets.training_bytes_per_cell`'s estimate for the same sizes.

Usage: ``python benchmarks/training_memory.py [--json PATH]``; ``--quick`` for two small points.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent / "output"  # raw output, git-ignored
DATA = Path("../shared/data")
# preset -> data set -> batch sizes; the paper preset's steps need GBs per few cells on the CPU.
POINTS = {
    "small": {"example": [16, 64, 256], "cellbench_lung_celllines.h5ad": [16, 64, 256]},
    "paper": {"example": [1, 2, 4, 8], "cellbench_lung_celllines.h5ad": [1]},
}
QUICK_POINTS = {"small": {"example": [16]}, "paper": {"example": [2]}}


def child(preset: str, data: str, batch_size: int) -> dict:
    """Two CPU training steps; the rise of peak RSS over its value before training, in bytes."""
    import anndata as ad
    import scvi
    import torch

    from sctrilemma import SCTrilemma
    from sctrilemma.data import load_example
    from sctrilemma.model._presets import optimizer_bytes, training_bytes_per_cell

    torch.set_num_threads(1)
    scvi.settings.seed = 0
    adata = load_example() if data == "example" else ad.read_h5ad(DATA / data)
    key = "donor" if "donor" in adata.obs else "batch"
    adata.obs[key] = adata.obs[key].astype(str)
    SCTrilemma.setup_anndata(adata, donor_key=key)
    model = SCTrilemma(adata, preset=preset)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    model.train(max_steps=2, batch_size=batch_size, accelerator="cpu", enable_progress_bar=False, check_memory=False)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "preset": preset,
        "data": data,
        "n_genes": adata.n_vars,
        "batch_size": batch_size,
        "peak_before_train_bytes": before,
        "training_rise_bytes": after - before,
        "estimate_bytes": training_bytes_per_cell(model.module, adata.n_vars) * batch_size
        + optimizer_bytes(model.module),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=OUTPUT / "training_memory.json")
    parser.add_argument("--child", nargs=3, metavar=("PRESET", "DATA", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        preset, data, batch = args.child
        print(json.dumps(child(preset, data, int(batch))))
        return
    rows = []
    for preset, datasets in (QUICK_POINTS if args.quick else POINTS).items():
        for data, batches in datasets.items():
            for batch in batches:
                run = subprocess.run(
                    [sys.executable, __file__, "--child", preset, data, str(batch)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                row = json.loads(run.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(
                    f"{preset:6s} {data:32s} genes {row['n_genes']:6d} batch {batch:4d}: training raised peak RSS "
                    f"by {row['training_rise_bytes'] / 2**30:6.2f} GiB (estimate {row['estimate_bytes'] / 2**30:6.2f})",
                    flush=True,
                )
    if not args.quick:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": "python benchmarks/training_memory.py", "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
