"""RankSyncedBatchNorm1d: plain BatchNorm1d alone, global-batch statistics and gradients under DDP (gloo, 2 ranks)."""

from __future__ import annotations

import os
import socket

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from sctrilemma.nn import RankSyncedBatchNorm1d


def test_rank_synced_batchnorm_is_batchnorm_without_ddp():
    torch.manual_seed(0)
    x = torch.randn(32, 8)
    synced, plain = RankSyncedBatchNorm1d(8), nn.BatchNorm1d(8)
    torch.testing.assert_close(synced(x), plain(x))
    torch.testing.assert_close(synced.running_var, plain.running_var)
    assert synced.state_dict().keys() == plain.state_dict().keys()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, x: torch.Tensor, upstream: torch.Tensor, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        norm = RankSyncedBatchNorm1d(x.shape[1])
        half = slice(rank * 10, (rank + 1) * 10)  # rank 0: 10 cells, rank 1: 10 others
        local = x[half].clone().requires_grad_(True)
        out = norm(local)
        (out * upstream[half]).sum().backward()
        results[rank] = (out.detach(), local.grad, norm.running_mean.clone(), norm.running_var.clone())
    finally:
        dist.destroy_process_group()


def test_rank_synced_batchnorm_ddp_matches_full_batch():
    torch.manual_seed(0)
    x = torch.randn(20, 6) * 3 + 1
    upstream = torch.randn(20, 6)
    results = mp.Manager().dict()
    # fork: the test module is not importable by name under --import-mode=importlib, so it cannot be spawned
    mp.start_processes(_rank, args=(_free_port(), x, upstream, results), nprocs=2, join=True, start_method="fork")
    full_input = x.clone().requires_grad_(True)
    reference = nn.BatchNorm1d(6)
    full = reference(full_input)
    (full * upstream).sum().backward()
    for rank in (0, 1):
        out, grad, running_mean, running_var = results[rank]
        rows = slice(rank * 10, (rank + 1) * 10)
        np.testing.assert_allclose(out.numpy(), full.detach()[rows].numpy(), atol=1e-5)
        np.testing.assert_allclose(grad.numpy(), full_input.grad[rows].numpy(), atol=1e-5)
        np.testing.assert_allclose(running_mean.numpy(), reference.running_mean.numpy(), atol=1e-6)
        np.testing.assert_allclose(running_var.numpy(), reference.running_var.numpy(), atol=1e-5)
