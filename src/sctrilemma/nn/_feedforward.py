"""The SwiGLU feed-forward layer of the cross-attention blocks, with a CPU autograd path of few passes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _GatedSiLU(torch.autograd.Function):
    """``silu(gate) * value`` of ``hidden = [gate, value]``, saving only ``hidden`` for the backward pass.

    The backward pass writes both halves of the gradient into one tensor, where autograd would keep
    ``silu(gate)`` and concatenate the two half gradients (a pass over twice the hidden width).
    """

    @staticmethod
    def forward(ctx, hidden: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(hidden)
        gate, value = hidden.chunk(2, dim=-1)
        return F.silu(gate) * value

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (hidden,) = ctx.saved_tensors
        gate, value = hidden.chunk(2, dim=-1)
        grad_hidden = torch.empty_like(hidden)
        grad_gate, grad_value = grad_hidden.chunk(2, dim=-1)
        torch.ops.aten.silu_backward.grad_input(grad * value, gate, grad_input=grad_gate)
        torch.mul(grad, F.silu(gate), out=grad_value)
        return grad_hidden


def gated_silu(hidden: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * value`` for ``hidden = [gate, value]`` split in halves along the last axis."""
    return _GatedSiLU.apply(hidden)


class SwiGLU(nn.Module):
    """SwiGLU feed-forward layer :cite:p:`shazeer2020glu`: ``dropout(W2 dropout(silu(W1 x) * W3 x))``.

    ``W1`` (gate) and ``W3`` (value) are fused into one projection of width ``2 * n_ffn``, gate half
    first. Dropout acts on the hidden layer and on the output, as in the authors' configuration.
    """

    def __init__(self, n_hidden: int, *, n_ffn: int, dropout_rate: float = 0.0) -> None:
        super().__init__()
        self.proj_in = nn.Linear(n_hidden, 2 * n_ffn)
        self.proj_out = nn.Linear(n_ffn, n_hidden)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x: torch.Tensor, input_scale: torch.Tensor | None = None) -> torch.Tensor:
        """Apply the layer to ``x`` of shape ``(..., n_hidden)``, times ``input_scale`` ``(n_hidden,)`` if given.

        ``input_scale`` (a preceding RMSNorm's weight) is folded into the first projection's weight.
        """
        return self.dropout(self.proj_out(self._hidden(x, input_scale)))

    def read_out(
        self, residual: torch.Tensor, x: torch.Tensor, readout: nn.Linear, input_scale: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``readout(residual + self(x, input_scale))``: a linear read-out of the residual stream after this layer.

        Where no dropout acts on the output, ``readout`` is folded into the output projection: ``(n_out, n_ffn)``
        instead of ``(n_hidden, n_ffn)`` weights, and no ``(..., n_hidden)`` sum is formed: the same function, cheaper.
        """
        if self.training and self.dropout.p > 0.0:
            return readout(residual + self(x, input_scale))
        weight, bias = self.folded_readout(readout)
        return F.linear(residual, readout.weight) + F.linear(self._hidden(x, input_scale), weight, bias)

    def folded_readout(self, readout: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
        """``readout`` composed with the output projection: weight ``(n_out, n_ffn)`` and bias ``(n_out,)``."""
        bias = readout.weight @ self.proj_out.bias
        return readout.weight @ self.proj_out.weight, bias if readout.bias is None else bias + readout.bias

    def _hidden(self, x: torch.Tensor, input_scale: torch.Tensor | None) -> torch.Tensor:
        weight = self.proj_in.weight if input_scale is None else self.proj_in.weight * input_scale
        return self.dropout(gated_silu(F.linear(x, weight, self.proj_in.bias)))
