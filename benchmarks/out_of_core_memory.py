"""Peak memory of embedding N and 10 x N cells: backed ``.h5ad`` and a SOMA experiment (out of core) vs in-memory.

Each measurement runs in a fresh Python process (peak RSS: ``VmHWM`` of ``/proc/self/status``); the model is the shipped
example reference, the cells are the shipped example repeated. Out of core, peak RSS should not grow with the
number of cells (apart from the ``(n_cells, 64)`` float32 embedding itself, 7.7 MB at 30,000 cells). Every mode runs
under three glibc allocator settings (``ALLOCATORS``): raised mmap/trim thresholds, glibc's defaults, and fixed
thresholds. The first two keep freed activation buffers, whose sizes vary from batch to batch, and the heap then grows
with the number of batches; with fixed thresholds the streamed paths stay flat.

    python benchmarks/out_of_core_memory.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent / "output"  # raw output, git-ignored
BASE_CELLS = 3000
MODES = ("in-memory h5ad", "backed h5ad", "SOMA query")
# Allocator settings: raised glibc thresholds (freed memory kept for reuse), glibc's defaults, and fixed glibc
# thresholds (no dynamic mmap threshold, so freed activation buffers go back to the OS instead of fragmenting the heap).
ALLOCATORS = {
    "raised": {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str((1 << 31) - 1)},
    "glibc": {},
    "fixed": {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"},
}


def _peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM).

    Not ``getrusage``'s ``ru_maxrss``: Linux keeps that across fork + exec, so a child would report its parent's peak.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: kilobytes on Linux, bytes on macOS


def child(mode: str, path: str) -> None:
    """Embed the cells at ``path`` with ``mode`` and print a JSON line of measurements."""
    import anndata as ad

    import sctrilemma

    model = sctrilemma.SCTrilemma.load(sctrilemma.data.example_reference_dir(), accelerator="cpu")
    before = _peak_rss_mb()
    start = time.perf_counter()
    if mode == "SOMA query":
        _, latent = model.get_latent_representation_soma(path, obs_value_filter=None, batch_size=512)
    else:
        adata = ad.read_h5ad(path, backed="r" if mode == "backed h5ad" else None)
        latent = model.get_latent_representation(adata, batch_size=512)
    seconds = time.perf_counter() - start
    print(json.dumps({"n_cells": int(latent.shape[0]), "rss_before_mb": before, "peak_rss_mb": _peak_rss_mb(),
                      "seconds": seconds}))  # fmt: skip


def write_inputs(directory: Path, n_cells: int) -> tuple[Path, Path]:
    """The example repeated to ``n_cells``, as an ``.h5ad`` and as a SOMA experiment."""
    import math

    import tiledbsoma.io

    from sctrilemma.data._census import example_census_anndata

    adata = example_census_anndata(n_copies=math.ceil(n_cells / BASE_CELLS))[:n_cells].copy()
    adata.obs["donor"] = adata.obs["donor_id"]  # the example reference's donor column
    h5ad = directory / f"cells_{n_cells}.h5ad"
    adata.write_h5ad(h5ad)
    soma = directory / f"cells_{n_cells}_soma"
    tiledbsoma.io.from_anndata(str(soma), adata, measurement_name="RNA", X_layer_name="raw")
    return h5ad, soma


def measure(mode: str, path: Path, allocator: str) -> dict:
    env = {**os.environ, **ALLOCATORS[allocator]}
    result = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(path)], capture_output=True, text=True, check=False, env=env
    )
    if result.returncode != 0:
        raise RuntimeError(f"{mode} on {path} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 1,000 instead of 3,000 cells")
    parser.add_argument("--json", type=Path, default=OUTPUT / "out_of_core_memory.json")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    n = 1000 if args.quick else BASE_CELLS
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        inputs = {size: write_inputs(Path(tmp), size) for size in (n, 10 * n)}
        for allocator in ALLOCATORS:
            for mode in MODES:
                for h5ad, soma in inputs.values():
                    path = soma if mode == "SOMA query" else h5ad
                    rows.append({"mode": mode, "allocator": allocator, **measure(mode, path, allocator)})
    print(f"{'mode':<16} {'allocator':>10} {'cells':>7} {'RSS after load (MB)':>20} {'peak RSS (MB)':>14} "
          f"{'growth (MB)':>12} {'s':>6}")  # fmt: skip
    for row in rows:
        row["growth_mb"] = row["peak_rss_mb"] - row["rss_before_mb"]
        print(f"{row['mode']:<16} {row['allocator']:>10} {row['n_cells']:>7} "
              f"{row['rss_before_mb']:>20.0f} {row['peak_rss_mb']:>14.0f} {row['growth_mb']:>12.0f} "
              f"{row['seconds']:>6.1f}")  # fmt: skip
    print("\npeak RSS at 10 x N / peak RSS at N:")
    for small, large in zip(rows[::2], rows[1::2], strict=True):
        print(f"  {small['mode']:<16} {small['allocator']:<10} {large['peak_rss_mb'] / small['peak_rss_mb']:.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
