"""Scratch: the common-depth embedding averaged over several thinning draws, paired on the same trained models.

The shipped embedding thins each cell once (a fixed hash of its counts) to the common depth. Here each cell is also
thinned with ``R - 1`` other hash salts and the ``R`` embeddings are averaged (``draws<R>``). Evaluation only: one
model per data set and seed (``trilemma.train_sctrilemma``, 240 s), all variants scored on the same scorecard samples.

Usage, from a snapshot holding ``src`` and ``benchmarks``::

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/results/quality/depth_draws/depth_draws.py \
        --datasets kang2018_pbmc_ctrl.h5ad --seeds 0 1 2 --json OUT.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from embedding_depth import paired_table, scored_rows, trained

import sctrilemma.module._depth as depth_module

_shipped_thin_cells = depth_module._thin_cells
SALT = {"value": 0}


def _salted_thin_cells(x: torch.Tensor, rate: torch.Tensor) -> torch.Tensor:
    """``_thin_cells`` with other draws for a salt above 0: the genes' columns rolled before hashing, then rolled back.

    The draws hash each gene's index, so rolling the columns gives every (cell, gene) entry another key and its
    molecules another draw; salt 0 is the shipped draw.
    """
    if SALT["value"] == 0:
        return _shipped_thin_cells(x, rate)
    shift = 1 + (SALT["value"] * 7919) % (x.shape[1] - 1)
    return torch.roll(_shipped_thin_cells(torch.roll(x, shift, dims=1), rate), -shift, dims=1)


depth_module._thin_cells = _salted_thin_cells


def run(path: Path, seed: int, budget_s: float, draws: list[int], n_repeats: int) -> list[dict]:
    adata, model, steps = trained(path, seed, budget_s)
    embeddings = []
    for salt in range(max(draws)):
        SALT["value"] = salt
        embeddings.append(model.get_latent_representation())
    SALT["value"] = 0
    for n in draws:
        adata.obsm[f"draws{n}"] = np.mean(embeddings[:n], axis=0)
    rows = scored_rows(adata, [f"draws{n}" for n in draws], path, seed, steps, n_repeats)
    print(json.dumps(rows), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--draws", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--n-repeats", type=int, default=5)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    rows = []
    for name in args.datasets:
        for seed in args.seeds:
            rows += run(Path(args.data_dir) / name, seed, args.budget_s, args.draws, args.n_repeats)
            Path(args.json).write_text(json.dumps(rows, indent=1))
    print(paired_table(rows, baseline="draws1"))


if __name__ == "__main__":
    main()
