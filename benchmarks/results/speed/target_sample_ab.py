"""The decoder's target sample of two checkouts, timed alternately in one process on real batches of 64 cells.

Usage (repository root): ``python benchmarks/results/speed/target_sample_ab.py --baseline-src OTHER/src
[--rounds 15] [--threads 1]``. After one warm-up call of each, every round times five calls of this checkout's
``target_sample`` and five of the baseline's, as a small-preset step calls it: 512 targets, and the data set's rare
genes by this checkout's ``RARE_GENE_DETECTION``. The ratio is per round.
"""

import argparse
import importlib.util
import statistics
import sys
from functools import partial
from pathlib import Path

import anndata as ad
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _speed import SHARED_DATA, paired_round_seconds

DATASETS = [
    "kang2018_pbmc_ctrl",
    "cellbench_lung_celllines",
    "zilionis2019_mouse_lung_cluey",
    "baron2016_pancreas_subset_cider",
]


def tokens_module(src: Path, name: str):
    """``sctrilemma/module/_tokens.py`` of the checkout at ``src``, loaded on its own."""
    spec = importlib.util.spec_from_file_location(name, src / "sctrilemma" / "module" / "_tokens.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def five_samples(module, x: torch.Tensor, rare: torch.Tensor) -> None:
    """Five target samples of ``x``, as a small-preset step draws one: 512 targets."""
    for _ in range(5):
        module.target_sample(x, 512, rare_genes=rare)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline-src", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    here = Path(__file__).resolve().parents[3] / "src"
    variants = {"baseline": tokens_module(args.baseline_src, "baseline_tokens"), "this": tokens_module(here, "tokens")}
    for name in DATASETS:
        adata = ad.read_h5ad(SHARED_DATA / f"{name}.h5ad")
        x = adata.X[:64]
        x = torch.tensor(x.toarray() if hasattr(x, "toarray") else x, dtype=torch.float32)
        detected = np.asarray((adata.X > 0).sum(0)).ravel()
        rare = torch.from_numpy(detected < variants["this"].RARE_GENE_DETECTION * adata.n_obs)
        calls = {label: partial(five_samples, module, x, rare) for label, module in variants.items()}
        ms = {label: [s / 5 * 1e3 for s in times] for label, times in paired_round_seconds(calls, args.rounds).items()}
        ratio = [new / old for new, old in zip(ms["this"], ms["baseline"], strict=True)]
        print(
            f"{name} ({x.shape[1]} genes): baseline {statistics.median(ms['baseline']):.1f} ms, "
            f"this {statistics.median(ms['this']):.1f} ms, ratio {statistics.mean(ratio):.2f} ± "
            f"{statistics.stdev(ratio):.2f} over {args.rounds} alternated rounds",
            flush=True,
        )


if __name__ == "__main__":
    main()
