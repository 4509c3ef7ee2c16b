"""Inverted dropout whose CPU mask is drawn from random integers instead of per-element Bernoulli samples."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_INT32_SPAN = 2**32


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """:func:`torch.nn.functional.dropout` with a cheaper mask on CPU.

    Each element is kept when a uniform 32-bit integer is at or above ``round(p * 2**32)`` (shifted to
    signed), so it is dropped with probability ``p`` to 2e-10 and kept ones are scaled by ``1 / (1 - p)``.
    Two mask elements come from each 64-bit draw of torch's default generator, so ``torch.manual_seed`` makes
    the masks reproducible. torch's per-element Bernoulli sampling took a quarter of a CPU training step
    (``benchmarks/results/speed/NOTES.md``). Off CPU this is ``F.dropout``.
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training=True)
    n_draws = (x.numel() + 1) // 2
    bits = torch.randint(-(2**63), 2**63 - 1, (n_draws,), dtype=torch.int64).view(torch.int32)[: x.numel()]
    threshold = round(p * _INT32_SPAN) - _INT32_SPAN // 2
    keep = (bits >= threshold).view(x.shape)
    return x * keep.to(x.dtype).mul_(1.0 / (1.0 - p))


class Dropout(nn.Dropout):
    """:class:`torch.nn.Dropout` computed by :func:`~sctrilemma.nn.dropout` (same state, same behaviour)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Drop elements of ``x`` with probability ``p`` in training mode."""
        return dropout(x, self.p, self.training)
