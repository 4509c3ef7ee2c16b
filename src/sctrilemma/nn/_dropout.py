"""Inverted dropout whose CPU mask is drawn from random integers instead of per-element Bernoulli samples."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_INT32_SPAN = 2**32


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """:func:`torch.nn.functional.dropout` with a cheaper mask on CPU.

    Each element is kept when a uniform 32-bit integer is at or above ``round(p * 2**32)`` (shifted to
    signed), so it is dropped with probability ``p`` to 2e-10 and kept ones are scaled by ``1 / (1 - p)``.
    Two mask elements come from each 64-bit draw of numpy's SFC64 generator, seeded for every call from torch's
    default generator, so ``torch.manual_seed`` makes the masks reproducible. torch's per-element Bernoulli
    sampling took a quarter of a CPU training step, and its integer draws are twice as slow as SFC64's
    (``benchmarks/results/speed/NOTES.md``). Off CPU this is ``F.dropout``.
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training=True)
    seed = int(torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64))
    draws = np.random.SFC64(seed).random_raw((x.numel() + 1) // 2)
    bits = torch.from_numpy(draws.view(np.int32))[: x.numel()]
    threshold = round(p * _INT32_SPAN) - _INT32_SPAN // 2
    keep = (bits >= threshold).view(x.shape)
    return _KeepAndScale.apply(x, keep, 1.0 / (1.0 - p))


class _KeepAndScale(torch.autograd.Function):
    """``x * keep * scale`` that saves only the boolean ``keep`` and masks the gradient the same way."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return torch.where(keep, x, 0.0).mul_(scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return torch.where(keep, grad, 0.0).mul_(ctx.scale), None, None


class Dropout(nn.Dropout):
    """:class:`torch.nn.Dropout` computed by :func:`~sctrilemma.nn.dropout` (same state, same behaviour)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Drop elements of ``x`` with probability ``p`` in training mode."""
        return dropout(x, self.p, self.training)
