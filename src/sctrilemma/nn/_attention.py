"""Pre-norm cross-attention blocks of the latent bottleneck and the decoder.

Shapes follow the convention ``(batch, length, n_hidden)``; attention runs through
:func:`torch.nn.functional.scaled_dot_product_attention`, which picks a fused kernel where one exists.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``x`` of shape ``(..., n_hidden)``."""
        gate, value = self.proj_in(x).chunk(2, dim=-1)
        return self.dropout(self.proj_out(self.dropout(F.silu(gate) * value)))


class CrossAttention(nn.Module):
    """Multi-head attention of ``queries`` over ``context`` (no self-attention among queries).

    The key and value projections are fused into one matrix multiplication.
    """

    def __init__(self, n_hidden: int, *, n_heads: int, dropout_rate: float = 0.0) -> None:
        super().__init__()
        if n_hidden % n_heads != 0:
            raise ValueError(f"`n_hidden` ({n_hidden}) must be divisible by `n_heads` ({n_heads}).")
        self.n_heads = n_heads
        self.dropout_rate = dropout_rate
        self.to_q = nn.Linear(n_hidden, n_hidden)
        self.to_kv = nn.Linear(n_hidden, 2 * n_hidden)
        self.to_out = nn.Linear(n_hidden, n_hidden)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        # (b, n, h*dh) -> (b, h, n, dh)
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, -1).transpose(1, 2)

    def forward(
        self, queries: torch.Tensor, context: torch.Tensor, context_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Attend.

        Parameters
        ----------
        queries
            Query tokens, shape ``(batch, n_queries, n_hidden)``.
        context
            Key/value tokens, shape ``(batch, n_context, n_hidden)``.
        context_mask
            Boolean ``(batch, n_context)``; ``True`` marks tokens that may be attended to.

        Returns
        -------
        Updated queries, shape ``(batch, n_queries, n_hidden)``.
        """
        q = self._split_heads(self.to_q(queries))
        k, v = (self._split_heads(t) for t in self.to_kv(context).chunk(2, dim=-1))
        attn_mask = None if context_mask is None else context_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout_rate if self.training else 0.0
        )
        b, _, n, _ = out.shape
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class CrossAttentionBlock(nn.Module):
    """Pre-norm cross-attention then SwiGLU feed-forward, both residual.

    Queries and context get their own RMSNorm (learnable weight, machine-epsilon ``eps``), as in the
    Perceiver's latent cross-attention :cite:p:`jaegle2021perceiver`. Dropout acts on the attention
    weights, not on the attention residual.
    """

    def __init__(self, n_hidden: int, *, n_heads: int, dropout_rate: float, ffn_multiplier: float = 4.0) -> None:
        super().__init__()
        self.norm_queries = nn.RMSNorm(n_hidden)
        self.norm_context = nn.RMSNorm(n_hidden)
        self.attention = CrossAttention(n_hidden, n_heads=n_heads, dropout_rate=dropout_rate)
        self.norm_ffn = nn.RMSNorm(n_hidden)
        self.ffn = SwiGLU(n_hidden, n_ffn=int(ffn_multiplier * n_hidden), dropout_rate=dropout_rate)

    def forward(
        self, queries: torch.Tensor, context: torch.Tensor, context_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Update ``queries`` ``(batch, n_queries, n_hidden)`` from ``context`` ``(batch, n_context, n_hidden)``."""
        queries = queries + self.attention(self.norm_queries(queries), self.norm_context(context), context_mask)
        return queries + self.ffn(self.norm_ffn(queries))
