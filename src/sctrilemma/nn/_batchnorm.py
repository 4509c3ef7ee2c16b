"""BatchNorm whose batch statistics are all-reduced across DDP ranks, on any device and backend (gloo or NCCL)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks; the gradient of each rank's input is the sum of the upstream gradients over ranks."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        total = tensor.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        total = grad.clone()
        dist.all_reduce(total)
        return total


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Differentiable sum of ``tensor`` over all DDP ranks."""
    return _AllReduceSum.apply(tensor)


def _distributed_world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class RankSyncedBatchNorm1d(nn.BatchNorm1d):
    """:class:`torch.nn.BatchNorm1d` that normalises with the statistics of the global batch under DDP.

    torch's :class:`~torch.nn.SyncBatchNorm` (Lightning's ``sync_batchnorm=True``) only runs on GPU; this layer
    all-reduces the per-channel count, sum and centred sum of squares with differentiable collectives, so gradients
    flow through the global statistics as in ``SyncBatchNorm``. Outside DDP, or in eval mode, it is exactly
    :class:`~torch.nn.BatchNorm1d`, with the same parameters and buffers (saved models are unaffected).

    Input ``(n, channels)``.
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Normalise ``input`` ``(n, num_features)`` with statistics of the batch summed over all ranks."""
        if not self.training or _distributed_world() == 1:
            return super().forward(input)
        values = input.float()
        count = all_reduce_sum(torch.full((1,), float(values.shape[0]), device=values.device))
        mean = all_reduce_sum(values.sum(0)) / count
        # Two passes (mean, then centred squares) avoid the cancellation of E[x^2] - E[x]^2.
        var = all_reduce_sum((values - mean).square().sum(0)) / count
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                momentum = 1.0 / float(self.num_batches_tracked) if self.momentum is None else float(self.momentum)
                unbiased = var * (count / (count - 1).clamp_min(1.0))
                self.running_mean.lerp_(mean.detach().to(self.running_mean.dtype), momentum)
                self.running_var.lerp_(unbiased.detach().to(self.running_var.dtype), momentum)
        output = (values - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            output = output * self.weight + self.bias
        return output.to(input.dtype)
