"""The layers inside the attention blocks and around the gene tokens.

- ``unit_rms``: division by the root mean square over the last axis, with a CPU autograd path of few passes.
- ``SwiGLU``: the feed-forward layer of the cross-attention blocks, with a CPU autograd path of few passes.
- ``RankSyncedBatchNorm1d``: BatchNorm whose batch statistics are all-reduced across DDP ranks, on any device and
  backend (gloo or NCCL).
- ``ExpressionGate``, ``TokenPooling``, ``QueryRouter``: E-Gate (expression-gated gene tokens) and C-Route (pooling
  and decoder-query routing).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class _UnitRMS(torch.autograd.Function):
    """``x / sqrt(mean(x**2) + eps)`` over the last axis, saving only its output and the inverse RMS.

    PyTorch composes this of element-wise operators, each a pass over the activations forward and backward;
    this makes two passes forward and three backward.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, eps: float) -> torch.Tensor:
        inverse_rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(x.shape[-1]).add_(eps)
        unit = x * inverse_rms.rsqrt_()
        ctx.save_for_backward(unit, inverse_rms)
        return unit

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        unit, inverse_rms = ctx.saved_tensors
        # The Jacobian of x / rms(x) applied to grad: (grad - unit * mean(grad * unit)) / rms(x).
        projection = torch.linalg.vecdot(grad, unit).unsqueeze_(-1).div_(unit.shape[-1])
        return torch.addcmul(grad, unit, projection, value=-1.0).mul_(inverse_rms), None


def unit_rms(x: torch.Tensor, eps: float | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x / sqrt(mean(x**2) + eps)`` over the last axis: :class:`~torch.nn.RMSNorm` without its weight.

    ``eps`` defaults to the machine epsilon of ``x``'s dtype, as in :class:`~torch.nn.RMSNorm`. With ``out``
    (of any floating dtype, e.g. bf16 for fp32 ``x``) the result is written there in the same pass. A block
    folds the norm's weight into the linear map that follows, so in training the norm's backward pass stays
    this cheap one.
    """
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    if out is None and x.device.type != "cpu":
        return F.rms_norm(x, (x.shape[-1],), eps=eps)  # CUDA's fused kernel
    if out is None and x.requires_grad and torch.is_grad_enabled():
        return _UnitRMS.apply(x, eps)
    inverse_rms = torch.rsqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True).square() / x.shape[-1] + eps)
    return x * inverse_rms if out is None else torch.mul(x, inverse_rms, out=out)


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


GeneEncoding = Literal["gate", "additive"]
DecoderQuery = Literal["gate", "additive", "none"]
Pooling = Literal["mean", "attention"]


class ExpressionGate(nn.Module):
    """Gene-expression tokens from gene identity and normalised expression (paper Eq. E-Gate).

    ``"gate"``: ``e = u_g * sigmoid(W_g (W_x x + b_x) + b_g)``, so ``||e|| <= ||u_g||``.
    ``"additive"`` (ablation): ``e = u_g + W_x x + b_x``.

    The two linears of the gate have no nonlinearity between them, so they collapse exactly to one
    per-feature affine map ``x * slope + intercept``, computed once per call instead of per token.
    """

    def __init__(self, n_hidden: int, *, gene_encoding: GeneEncoding = "gate") -> None:
        super().__init__()
        if gene_encoding not in ("gate", "additive"):
            raise ValueError(f"`gene_encoding` must be 'gate' or 'additive', got {gene_encoding!r}.")
        self.gene_encoding = gene_encoding
        self.expr_proj = nn.Linear(1, n_hidden)
        self.gate = nn.Linear(n_hidden, n_hidden) if gene_encoding == "gate" else None

    def affine(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Slope and intercept ``(n_hidden,)`` of the composed expression map."""
        slope, intercept = self.expr_proj.weight[:, 0], self.expr_proj.bias
        if self.gate is not None:
            slope, intercept = self.gate.weight @ slope, self.gate.weight @ intercept + self.gate.bias
        return slope, intercept

    def forward(self, gene_embedding: torch.Tensor, expression: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        """Tokens ``(..., n_hidden)`` from ``gene_embedding`` ``(..., n_hidden)`` and ``expression`` ``(...)``.

        With ``inplace=True`` the tokens are written into ``gene_embedding`` (evaluation without autograd).
        """
        slope, intercept = self.affine()
        features = torch.addcmul(intercept, expression.unsqueeze(-1).to(slope.dtype), slope)
        if self.gate is None:
            return gene_embedding.add_(features) if inplace else gene_embedding + features
        return gene_embedding.mul_(features.sigmoid_()) if inplace else gene_embedding * torch.sigmoid(features)


class TokenPooling(nn.Module):
    """Pool ``K`` latent tokens into one cell vector: the mean (paper) or attention weights (ablation)."""

    def __init__(self, n_hidden: int, *, pooling: Pooling = "mean") -> None:
        super().__init__()
        if pooling not in ("mean", "attention"):
            raise ValueError(f"`pooling` must be 'mean' or 'attention', got {pooling!r}.")
        self.pooling = pooling
        self.score = nn.Linear(n_hidden, 1) if pooling == "attention" else None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Pool ``tokens`` ``(..., K, n_hidden)`` to ``(..., n_hidden)``."""
        if self.score is None:
            return tokens.mean(dim=-2)
        weights = torch.softmax(self.score(tokens), dim=-2)
        return (weights * tokens).sum(dim=-2)


class QueryRouter(nn.Module):
    """C-Route decoder queries ``q_g = u_g * sigmoid(h(s))`` with ``h`` = Linear-GELU-Linear.

    ``"additive"`` uses ``u_g + h(s)``; ``"none"`` uses ``u_g`` alone (no route from ``s``).
    """

    def __init__(self, n_hidden: int, *, decoder_query: DecoderQuery = "gate") -> None:
        super().__init__()
        if decoder_query not in ("gate", "additive", "none"):
            raise ValueError(f"`decoder_query` must be 'gate', 'additive' or 'none', got {decoder_query!r}.")
        self.decoder_query = decoder_query
        self.mlp = (
            None
            if decoder_query == "none"
            else nn.Sequential(nn.Linear(n_hidden, n_hidden), nn.GELU(), nn.Linear(n_hidden, n_hidden))
        )

    def modulation(self, pooled_sample: torch.Tensor) -> torch.Tensor | None:
        """Per-cell modulation ``(..., 1, n_hidden)`` from the pooled sample ``s`` ``(..., n_hidden)``."""
        if self.mlp is None:
            return None
        h = self.mlp(pooled_sample).unsqueeze(-2)
        return torch.sigmoid(h) if self.decoder_query == "gate" else h

    def forward(self, gene_embedding: torch.Tensor, modulation: torch.Tensor | None) -> torch.Tensor:
        """Queries ``(..., n_genes, n_hidden)`` from gene embeddings and :meth:`~QueryRouter.modulation`."""
        if modulation is None:
            return gene_embedding
        if self.decoder_query == "gate":
            return gene_embedding * modulation
        return gene_embedding + modulation
