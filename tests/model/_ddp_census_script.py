"""Train SCTrilemma from a local mini-census with real DDP (2 CPU processes, gloo); run by test_census_ddp.py.

Usage: python _ddp_census_script.py CENSUS_DIR OUT_DIR. Lightning re-executes this script for rank 1, hence the
``__main__`` guard. Every rank writes ``rank<k>.json`` (cells seen, weights checksum, BatchNorm running stats); rank 0
saves the trained reference to ``OUT_DIR/reference``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import scvi
import torch
from lightning.pytorch.callbacks import Callback

import sctrilemma

sys.path.insert(0, str(Path(__file__).parents[1] / "_support"))  # run as a script: the test suite's pythonpath
from tiny_sizes import TINY  # noqa: E402


class RecordCells(Callback):
    """Collect the ``soma_joinid`` of every training cell this rank sees."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen.extend(batch["soma_joinid"].tolist())


def main(census_dir: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    scvi.settings.seed = 0
    out = Path(out_dir)
    model = sctrilemma.SCTrilemma.from_census(
        census_dir, batch_size=64, cache_dir=out / "cache", preset="small", **TINY
    )
    recorder = RecordCells()
    model.train(
        max_steps=4, accelerator="cpu", devices=2, strategy="ddp", callbacks=[recorder], enable_progress_bar=False
    )
    rank = int(torch.distributed.get_rank()) if torch.distributed.is_initialized() else 0
    state = model.module.state_dict()
    weights = torch.cat([v.detach().float().ravel() for k, v in sorted(state.items()) if v.is_floating_point()])
    report = {
        "rank": rank,
        "world_size": torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1,
        "seen": recorder.seen,
        "weights": weights.numpy().astype(np.float64).tolist(),
        "running_mean": model.module.encoder.posterior_norm.running_mean.tolist(),
        "loss": model.history["train_loss"].iloc[:, 0].tolist() if rank == 0 else None,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    if rank == 0:
        model.save(out / "reference", overwrite=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
