"""Division by the root mean square over the last axis, with a CPU autograd path of few passes."""

from __future__ import annotations

import torch
import torch.nn.functional as F


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
