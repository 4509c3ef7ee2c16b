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


def unit_rms(x: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """``x / sqrt(mean(x**2) + eps)`` over the last axis: :class:`~torch.nn.RMSNorm` without its weight."""
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


class CrossAttention(nn.Module):
    """Multi-head attention of ``queries`` over ``context`` (no self-attention among queries).

    The key and value projections are fused into one matrix multiplication. :meth:`~sctrilemma.nn.CrossAttention.attend_absorbed`
    computes the same attention without projecting the context at all (see there).
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

    def context_flops(self, n_queries: int, n_context: int) -> tuple[int, int]:
        """FLOPs per cell that grow with the context, of (``forward``, ``attend_absorbed``)."""
        width = self.to_q.in_features
        plain = 4 * n_context * width * width + 4 * n_queries * n_context * width
        absorbed = 4 * self.n_heads * n_queries * n_context * width
        return plain, absorbed

    def short_context_flops(self, n_queries: int, n_context: int) -> tuple[int, int]:
        """FLOPs per cell of many queries over a short context, of (``forward``, :class:`ShortContextBlock`)."""
        width = self.to_q.in_features
        plain = n_queries * (4 * width * width + 4 * n_context * width)
        absorbed = n_queries * 4 * width * self.n_heads * n_context + 4 * n_context * width * width
        return plain, absorbed

    def attend_absorbed(
        self,
        queries: torch.Tensor,
        unit_context: torch.Tensor,
        context_weight: torch.Tensor,
        context_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``forward`` on ``context = unit_context * context_weight`` without projecting the context.

        Keys and values are linear in the context, so each head's query is mapped back through the key
        projection, ``q_h W_k,h``, and scored against the context directly; the key bias adds the same
        score to every context token and cancels in the softmax. Values are applied after the
        attention weights, ``(P_h c) W_v,h^T + b_v,h`` (the weights sum to one). Per cell this costs
        ``4 H K n d`` instead of ``4 n d^2 + 4 K n d`` FLOPs, fewer whenever ``H K < d + K``
        (the paper's 512 < 576), and never materialises the ``(n, 2d)`` keys and values. Attention
        dropout is not supported: use it in evaluation.

        Parameters
        ----------
        queries
            Normalised query tokens ``(batch, K, d)``.
        unit_context
            Context tokens divided by their RMS, ``(batch, n, d)``, shared by all blocks.
        context_weight
            The context RMSNorm's weight ``(d,)``.
        context_mask
            Boolean ``(batch, n)``, ``True`` for tokens that may be attended to.
        """
        batch, n_queries, width = queries.shape
        heads = self.n_heads
        head_width = width // heads
        key_weight, value_weight = self.to_kv.weight.split(width)
        value_bias = self.to_kv.bias[width:]
        q = self.to_q(queries).view(batch, n_queries, heads, head_width).transpose(1, 2)
        key_weight = key_weight.view(heads, head_width, width) * (context_weight * head_width**-0.5)
        absorbed = torch.matmul(q, key_weight).reshape(batch, heads * n_queries, width)
        scores = torch.bmm(absorbed.to(unit_context.dtype), unit_context.transpose(1, 2))
        if context_mask is not None:
            scores = scores.masked_fill(~context_mask[:, None, :], float("-inf"))
        weights = torch.softmax(scores, dim=-1).to(unit_context.dtype)
        pooled = torch.bmm(weights, unit_context).view(batch, heads, n_queries, width)
        value_weight = (value_weight * context_weight).view(heads, head_width, width)
        out = torch.matmul(pooled.to(value_weight.dtype), value_weight.transpose(1, 2))
        out = out + value_bias.view(heads, 1, head_width)
        return self.to_out(out.transpose(1, 2).reshape(batch, n_queries, width))


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

    def forward_unit_context(
        self, queries: torch.Tensor, unit_context: torch.Tensor, context_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``forward`` with the context given as ``unit_rms(context)``.

        Runs :meth:`~sctrilemma.nn.CrossAttention.attend_absorbed`, so no attention dropout: evaluation only.
        """
        attended = self.attention.attend_absorbed(
            self.norm_queries(queries), unit_context, self.norm_context.weight, context_mask
        )
        queries = queries + attended
        return queries + self.ffn(self.norm_ffn(queries))


class ShortContextBlock:
    """A :class:`CrossAttentionBlock` in evaluation, prepared for many queries per cell over a short context.

    In the decoder thousands of gene queries per cell attend to the cell's ``K`` latent tokens. Keys and
    values are linear in those tokens, so per cell they are folded into the query and output projections
    (:meth:`~sctrilemma.nn.ShortContextBlock.set_context`): attention becomes ``softmax(u M_c + m_c) N_c``
    with ``u`` the unit-RMS queries, ``M_c`` ``(d, H K)`` and ``N_c`` ``(H K, d)``, two batched matrix
    products costing ``4 H K d`` FLOPs per query instead of ``4 d^2 + 4 K d``. The RMSNorm weights are
    folded into the linear maps that follow them and every matrix is cast once to ``dtype``; the residual
    stream stays fp32. No dropout: evaluation only.

    Parameters
    ----------
    block
        The block to evaluate.
    dtype
        Arithmetic of the matrix products (``torch.float32`` or ``torch.bfloat16``).
    """

    def __init__(self, block: CrossAttentionBlock, dtype: torch.dtype) -> None:
        self.block, self.dtype = block, dtype
        ffn = block.ffn
        self.ffn_in_weight = (ffn.proj_in.weight * block.norm_ffn.weight).to(dtype)
        self.ffn_in_bias = ffn.proj_in.bias.to(dtype)
        self.ffn_out_weight = ffn.proj_out.weight.to(dtype)
        self.ffn_out_bias = ffn.proj_out.bias.to(dtype)
        self.out_bias = block.attention.to_out.bias.to(dtype)

    def set_context(self, context: torch.Tensor) -> None:
        """Fold the keys and values of the cells' latent tokens ``context`` ``(batch, K, d)`` into ``M_c, m_c, N_c``."""
        block, attention = self.block, self.block.attention
        batch, n_context, width = context.shape
        heads = attention.n_heads
        head_width = width // heads
        scale = head_width**-0.5
        keys, values = attention.to_kv(block.norm_context(context)).chunk(2, dim=-1)
        keys = keys.reshape(batch, n_context, heads, head_width)
        values = values.reshape(batch, n_context, heads, head_width)
        query_weight = (attention.to_q.weight * block.norm_queries.weight).view(heads, head_width, width)
        query_bias = attention.to_q.bias.view(heads, head_width)
        score_weight = torch.einsum("hed,cjhe->cdhj", query_weight * scale, keys)
        score_bias = torch.einsum("he,cjhe->chj", query_bias * scale, keys)
        value_weight = torch.einsum("cjhe,dhe->chjd", values, attention.to_out.weight.view(width, heads, head_width))
        self.score_weight = score_weight.reshape(batch, width, heads * n_context).to(self.dtype)
        self.score_bias = score_bias.reshape(batch, 1, heads * n_context).to(self.dtype)
        self.value_weight = value_weight.reshape(batch, heads * n_context, width).to(self.dtype)
        self.context_shape = (heads, n_context)

    def __call__(self, queries: torch.Tensor) -> torch.Tensor:
        """Updated fp32 ``queries`` ``(batch, n, d)`` of the cells of :meth:`set_context`."""
        batch, n_queries, width = queries.shape
        block = self.block
        unit = F.rms_norm(queries, (width,), eps=block.norm_queries.eps).to(self.dtype)
        scores = torch.baddbmm(self.score_bias, unit, self.score_weight)
        weights = torch.softmax(scores.view(batch, n_queries, *self.context_shape), dim=-1)
        queries = queries + torch.baddbmm(self.out_bias, weights.view(batch, n_queries, -1), self.value_weight)
        unit = F.rms_norm(queries, (width,), eps=block.norm_ffn.eps).to(self.dtype)
        gate, value = F.linear(unit, self.ffn_in_weight, self.ffn_in_bias).chunk(2, dim=-1)
        return queries + F.linear(F.silu(gate) * value, self.ffn_out_weight, self.ffn_out_bias)
