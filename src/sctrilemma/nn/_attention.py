"""Pre-norm cross-attention blocks of the latent bottleneck and the decoder.

Shapes follow the convention ``(batch, length, n_hidden)``; attention runs through
:func:`torch.nn.functional.scaled_dot_product_attention`, which picks a fused kernel where one exists.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from sctrilemma.nn._layers import SwiGLU, unit_rms

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable


class Workspace:
    """Output buffers reused across the chunks of an evaluation loop.

    Chunks of the same size would otherwise allocate, fault in and free the same large blocks again and
    again (glibc returns large freed blocks to the OS); writing into reused buffers measured 8-14 % faster
    decoding. A buffer is valid until the next :meth:`get` of its name.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """An uninitialised tensor of ``shape`` and ``dtype`` backed by the buffer ``name``."""
        size = math.prod(shape)
        buffer = self._buffers.get(name)
        if buffer is None or buffer.numel() < size or buffer.dtype != dtype or buffer.device != device:
            buffer = self._buffers[name] = torch.empty(size, dtype=dtype, device=device)
        return buffer[:size].view(shape)


class PreparedCache:
    """Blocks prepared for evaluation from a module's weights: built once, rebuilt when the weights change.

    The key is the arithmetic, the device and each weight's storage and version counter, so an optimiser step, a
    ``load_state_dict`` or a move to another device rebuilds them. :meth:`clear` drops them (on entering training).
    """

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.value = None

    def get(self, parameters: Iterable[torch.Tensor], dtype: torch.dtype, device: torch.device, build: Callable):
        """The value ``build()`` made for these weights, arithmetic and device; built now if there is none."""
        key = (dtype, device, *((p.data_ptr(), p._version) for p in parameters))
        if self.key != key:
            self.key, self.value = key, build()
        return self.value

    def clear(self) -> None:
        """Drop the prepared blocks."""
        self.key = self.value = None


class CrossAttention(nn.Module):
    """Multi-head attention of ``queries`` over ``context`` (no self-attention among queries).

    The key and value projections are fused into one matrix multiplication. In evaluation,
    :class:`~sctrilemma.nn.LongContextBlock` and :class:`~sctrilemma.nn.ShortContextBlock` compute the same attention with fewer FLOPs;
    in CPU training their autograd counterparts (``_absorbed_forward``, ``_folded_forward``) do.
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
        self,
        queries: torch.Tensor,
        context: torch.Tensor,
        context_mask: torch.Tensor | None = None,
        context_scale: torch.Tensor | None = None,
        query_scale: torch.Tensor | None = None,
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
        context_scale
            ``(n_hidden,)`` factor applied to ``context`` features before the key/value projection,
            folded into its weight (a preceding RMSNorm's weight).
        query_scale
            ``(n_hidden,)`` factor applied to ``queries`` features before the query projection, folded the
            same way.

        Returns
        -------
        Updated queries, shape ``(batch, n_queries, n_hidden)``.
        """
        if context_mask is None and context_scale is None and self._folds_context(queries, context):
            return self._folded_forward(queries, context, query_scale)
        if self._absorbs_context(queries, context):
            return self._absorbed_forward(queries, context, context_mask, context_scale, query_scale)
        q_weight = self.to_q.weight if query_scale is None else self.to_q.weight * query_scale
        q = self._split_heads(F.linear(queries, q_weight, self.to_q.bias))
        kv_weight = self.to_kv.weight if context_scale is None else self.to_kv.weight * context_scale
        k, v = (self._split_heads(t) for t in F.linear(context, kv_weight, self.to_kv.bias).chunk(2, dim=-1))
        attn_mask = None if context_mask is None else context_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout_rate if self.training else 0.0
        )
        b, _, n, _ = out.shape
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))

    def fold_context(
        self, context: torch.Tensor, query_scale: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The keys and values of a short ``context`` ``(batch, K, d)`` folded into per-cell linear maps.

        Returns ``(score_weight, score_bias, value_weight)`` of shapes ``(batch, d, H K)``, ``(batch, 1, H K)``
        and ``(batch, H K, d)``: the scaled attention scores of queries ``u`` ``(batch, n, d)`` (the input of
        ``to_q``, multiplied by ``query_scale`` if given) are ``u @ score_weight + score_bias``, one block of
        ``K`` per head, and ``softmax(scores) @ value_weight + to_out.bias`` is the attention's output.
        """
        batch, n_context, width = context.shape
        heads = self.n_heads
        head_width = width // heads
        scale = head_width**-0.5
        keys, values = self.to_kv(context).chunk(2, dim=-1)
        keys = keys.reshape(batch, n_context, heads, head_width)
        values = values.reshape(batch, n_context, heads, head_width)
        query_weight = self.to_q.weight if query_scale is None else self.to_q.weight * query_scale
        query_weight = query_weight.view(heads, head_width, width)
        score_weight = torch.einsum("hed,cjhe->cdhj", query_weight * scale, keys)
        score_bias = torch.einsum("he,cjhe->chj", self.to_q.bias.view(heads, head_width) * scale, keys)
        value_weight = torch.einsum("cjhe,dhe->chjd", values, self.to_out.weight.view(width, heads, head_width))
        return (
            score_weight.reshape(batch, width, heads * n_context),
            score_bias.reshape(batch, 1, heads * n_context),
            value_weight.reshape(batch, heads * n_context, width),
        )

    def _folds_context(self, queries: torch.Tensor, context: torch.Tensor) -> bool:
        """Whether :meth:`_folded_forward` computes this attention with fewer FLOPs (on CPU only).

        On CUDA the fused attention kernels stay: they never materialise the ``(batch, n, H K)`` weights.
        """
        if queries.device.type != "cpu" or queries.dim() != 3:
            return False
        plain, folded = self.short_context_flops(queries.shape[1], context.shape[1])
        return folded < plain

    def _folded_forward(
        self, queries: torch.Tensor, context: torch.Tensor, query_scale: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The attention of many queries over a short context through :meth:`fold_context`, with autograd.

        Two batched matrix products per cell replace the query and output projections and the per-head
        attention; measured 38 % faster than the fused CPU kernel for the small preset's decoder in training.
        """
        batch, n_queries, _ = queries.shape
        score_weight, score_bias, value_weight = self.fold_context(context, query_scale)
        scores = torch.baddbmm(score_bias, queries, score_weight)
        weights = torch.softmax(scores.view(batch, n_queries, self.n_heads, -1), dim=-1)
        weights = F.dropout(weights, self.dropout_rate, self.training).view(batch, n_queries, -1)
        return torch.baddbmm(self.to_out.bias, weights, value_weight)

    def _absorbs_context(self, queries: torch.Tensor, context: torch.Tensor) -> bool:
        """Whether :meth:`_absorbed_forward` computes this attention with fewer FLOPs (on CPU only)."""
        if queries.device.type != "cpu" or queries.dim() != 3:
            return False
        plain, absorbed = self.context_flops(queries.shape[1], context.shape[1])
        return absorbed < plain

    def _absorbed_forward(
        self,
        queries: torch.Tensor,
        context: torch.Tensor,
        context_mask: torch.Tensor | None,
        context_scale: torch.Tensor | None,
        query_scale: torch.Tensor | None,
    ) -> torch.Tensor:
        """The attention of a few queries over a long context without projecting the context, with autograd.

        The training counterpart of :class:`~sctrilemma.nn.LongContextBlock`: each head's scaled query is
        mapped back through the key projection and scored against the context itself (the key bias cancels
        in the softmax), and the value projection is applied to the attention-weighted context. The
        ``(batch, n, 2 d)`` keys and values are never formed, nor their head layout and gradients.
        """
        batch, n_queries, width = queries.shape
        heads = self.n_heads
        head_width = width // heads
        query_weight = self.to_q.weight if query_scale is None else self.to_q.weight * query_scale
        key_weight, value_weight = self.to_kv.weight.split(width)
        if context_scale is not None:
            key_weight, value_weight = key_weight * context_scale, value_weight * context_scale
        heads_queries = F.linear(queries, query_weight, self.to_q.bias).view(batch, n_queries, heads, head_width)
        key_weight = key_weight.view(heads, head_width, width) * head_width**-0.5
        absorbed = torch.einsum("bqhe,hed->bhqd", heads_queries, key_weight).reshape(batch, heads * n_queries, width)
        empty = None
        if context_mask is None:
            scores = torch.bmm(absorbed, context.transpose(1, 2))
        else:
            # A cell with no token to attend to gets zero attention, as in scaled_dot_product_attention.
            empty = ~context_mask.any(dim=1)
            hidden = ~context_mask & ~empty[:, None]
            mask_bias = torch.zeros(context_mask.shape, dtype=context.dtype, device=context.device)
            mask_bias = mask_bias.masked_fill_(hidden, float("-inf"))[:, None, :]
            scores = torch.baddbmm(mask_bias, absorbed, context.transpose(1, 2))
        weights = F.dropout(torch.softmax(scores, dim=-1), self.dropout_rate, self.training)
        pooled = torch.bmm(weights, context).view(batch, heads, n_queries, width)
        values = torch.einsum("bhqd,hed->bqhe", pooled, value_weight.view(heads, head_width, width))
        values = values + self.to_kv.bias[width:].view(heads, head_width)
        if empty is not None and bool(empty.any()):
            values = values.masked_fill(empty[:, None, None, None], 0.0)
        return self.to_out(values.reshape(batch, n_queries, width))

    def context_flops(self, n_queries: int, n_context: int) -> tuple[int, int]:
        """FLOPs per cell that grow with the context, of (``forward``, :class:`~sctrilemma.nn.LongContextBlock`)."""
        width = self.to_q.in_features
        plain = 4 * n_context * width * width + 4 * n_queries * n_context * width
        absorbed = 4 * self.n_heads * n_queries * n_context * width
        return plain, absorbed

    def short_context_flops(self, n_queries: int, n_context: int) -> tuple[int, int]:
        """FLOPs per cell of many queries over a short context, of (``forward``, :class:`~sctrilemma.nn.ShortContextBlock`)."""
        width = self.to_q.in_features
        plain = n_queries * (4 * width * width + 4 * n_context * width)
        absorbed = n_queries * 4 * width * self.n_heads * n_context + 4 * n_context * width * width
        return plain, absorbed


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
        self,
        queries: torch.Tensor,
        context: torch.Tensor,
        context_mask: torch.Tensor | None = None,
        *,
        unit_context: bool = False,
        readout: nn.Linear | None = None,
    ) -> torch.Tensor:
        """Update ``queries`` ``(batch, n_queries, n_hidden)`` from ``context`` ``(batch, n_context, n_hidden)``.

        With ``unit_context=True``, ``context`` is already ``unit_rms``-normalised (with this block's
        ``eps``): the context norm's weight is then folded into the key/value projection, so blocks sharing
        one long context normalise it once (the encoder in training). With ``readout``, the block returns
        ``readout(updated queries)``, computed by :meth:`~sctrilemma.nn.SwiGLU.read_out` (the decoder's count head).
        """
        # The query and feed-forward norms' weights are folded into the projections that follow them.
        unit_queries = unit_rms(queries, self.norm_queries.eps)
        query_scale = self.norm_queries.weight
        if unit_context:
            attended = self.attention(unit_queries, context, context_mask, self.norm_context.weight, query_scale)
        else:
            attended = self.attention(unit_queries, self.norm_context(context), context_mask, None, query_scale)
        queries = queries + attended
        unit_queries = unit_rms(queries, self.norm_ffn.eps)
        if readout is not None:
            return self.ffn.read_out(queries, unit_queries, readout, self.norm_ffn.weight)
        return queries + self.ffn(unit_queries, self.norm_ffn.weight)


class _FoldedFeedForward:
    """A block's RMSNorm and SwiGLU residual branch in evaluation, for the prepared blocks below.

    The RMSNorm weight is folded into the first projection and the weights are cast once to ``dtype``;
    the hidden layer is activated in place in reused ``Workspace`` buffers. No dropout, no autograd. With
    ``readout``, the branch's output projection and ``readout`` are folded into one ``(n_out, n_ffn)`` map, as
    in :meth:`~sctrilemma.nn.SwiGLU.read_out`, and :meth:`read_out` gives ``readout(residual + branch)``.
    """

    def __init__(self, block: CrossAttentionBlock, dtype: torch.dtype, readout: nn.Linear | None = None) -> None:
        ffn = block.ffn
        self.eps, self.dtype = block.norm_ffn.eps, dtype
        self.in_weight = (ffn.proj_in.weight * block.norm_ffn.weight).to(dtype)
        self.in_bias = ffn.proj_in.bias.to(dtype)
        if readout is None:
            self.out_weight = ffn.proj_out.weight.to(dtype)
            self.out_bias = ffn.proj_out.bias.to(dtype)
        else:
            folded_weight, folded_bias = ffn.folded_readout(readout)
            self.readout_weight = readout.weight.float()
            self.folded_weight, self.folded_bias = folded_weight.to(dtype), folded_bias.float()

    def _activated(self, rows: torch.Tensor, workspace: Workspace) -> torch.Tensor:
        dtype, device = self.dtype, rows.device
        unit = unit_rms(rows, self.eps, out=workspace.get("unit", rows.shape, dtype, device))
        hidden_shape = (rows.shape[0], self.in_weight.shape[0])
        hidden = torch.addmm(
            self.in_bias, unit, self.in_weight.t(), out=workspace.get("hidden", hidden_shape, dtype, device)
        )
        gate, value = hidden.chunk(2, dim=-1)
        return F.silu(gate, inplace=True).mul_(value)

    def add_to(self, residual: torch.Tensor, workspace: Workspace) -> torch.Tensor:
        """Add the branch to the contiguous fp32 ``residual`` ``(..., d)`` in place."""
        rows = residual.view(-1, residual.shape[-1])
        gate = self._activated(rows, workspace)
        rows += torch.addmm(
            self.out_bias, gate, self.out_weight.t(), out=workspace.get("update", rows.shape, self.dtype, rows.device)
        )
        return residual

    def read_out(self, residual: torch.Tensor, workspace: Workspace) -> torch.Tensor:
        """``readout(residual + branch(residual))`` ``(..., n_out)`` in fp32; the ``(..., d)`` update is never formed."""
        rows = residual.view(-1, residual.shape[-1])
        gate = self._activated(rows, workspace)
        out = torch.addmm(self.folded_bias, rows, self.readout_weight.t())
        out += torch.mm(gate, self.folded_weight.t())
        return out.view(*residual.shape[:-1], -1)


class ShortContextBlock:
    """A :class:`~sctrilemma.nn.CrossAttentionBlock` in evaluation, prepared for many queries per cell over a short context.

    In the decoder thousands of gene queries per cell attend to the cell's ``K`` latent tokens. Keys and
    values are linear in those tokens, so per cell they are folded into the query and output projections
    (:meth:`~sctrilemma.nn.ShortContextBlock.set_context`): attention becomes ``softmax(u M_c + m_c) N_c``
    with ``u`` the unit-RMS queries, ``M_c`` ``(d, H K)`` and ``N_c`` ``(H K, d)``, two batched matrix
    products costing ``4 H K d`` FLOPs per query instead of ``4 d^2 + 4 K d``. The RMSNorm weights are
    folded into the linear maps that follow them and every matrix is cast once to ``dtype``; the residual
    stream stays fp32. No dropout and no autograd (activations are updated in place): evaluation only.

    Parameters
    ----------
    block
        The block to evaluate.
    dtype
        Arithmetic of the matrix products (``torch.float32`` or ``torch.bfloat16``).
    readout
        A linear map applied to the block's output (the decoder's count head), folded into the feed-forward
        layer's output projection: the block then returns its ``(batch, n, n_out)`` result.
    """

    def __init__(self, block: CrossAttentionBlock, dtype: torch.dtype, readout: nn.Linear | None = None) -> None:
        self.block, self.dtype, self.readout = block, dtype, readout
        self.out_bias = block.attention.to_out.bias.to(dtype)
        self.feed_forward = _FoldedFeedForward(block, dtype, readout)

    def set_context(self, context: torch.Tensor) -> None:
        """Fold the keys and values of the cells' latent tokens ``context`` ``(batch, K, d)`` into ``M_c, m_c, N_c``."""
        block = self.block
        heads, n_context = block.attention.n_heads, context.shape[1]
        score_weight, score_bias, value_weight = block.attention.fold_context(
            block.norm_context(context), block.norm_queries.weight
        )
        self.score_weight = score_weight.to(self.dtype)
        self.score_bias = score_bias.to(self.dtype)
        self.value_weight = value_weight.to(self.dtype)
        self.context_shape = (heads, n_context)

    def __call__(
        self, queries: torch.Tensor, workspace: Workspace | None = None, cells: slice = slice(None)
    ) -> torch.Tensor:
        """Update fp32 ``queries`` ``(batch, n, d)`` of the cells of :meth:`set_context` in place; without autograd.

        ``workspace`` holds the intermediate buffers; pass the same one for every chunk of a loop. ``cells`` selects
        the queries' cells among those of :meth:`set_context` (all by default). A block prepared with a ``readout``
        returns ``readout(updated queries)`` ``(batch, n, n_out)`` instead.
        """
        batch, n_queries, _ = queries.shape
        block, dtype, device = self.block, self.dtype, queries.device
        workspace = Workspace() if workspace is None else workspace
        unit = unit_rms(queries, block.norm_queries.eps, out=workspace.get("unit", queries.shape, dtype, device))
        scores_shape = (batch, n_queries, self.score_weight.shape[-1])
        scores = torch.baddbmm(
            self.score_bias[cells],
            unit,
            self.score_weight[cells],
            out=workspace.get("scores", scores_shape, dtype, device),
        )
        weights = workspace.get("weights", scores_shape, dtype, device)
        heads_shape = (batch, n_queries, *self.context_shape)
        torch.softmax(scores.view(heads_shape), dim=-1, out=weights.view(heads_shape))
        update = workspace.get("update", queries.shape, dtype, device)
        queries += torch.baddbmm(self.out_bias, weights, self.value_weight[cells], out=update)
        if self.readout is not None:
            return self.feed_forward.read_out(queries, workspace)
        return self.feed_forward.add_to(queries, workspace)


class LongContextBlock:
    """A :class:`~sctrilemma.nn.CrossAttentionBlock` in evaluation, prepared for a few queries per cell over a long context.

    In the encoder the ``K`` latent queries attend to thousands of gene tokens. Keys and values are linear
    in the context, so each head's query is mapped back through the key projection, ``q_h W_k,h``, and
    scored against the unit-RMS context directly; the key bias adds the same score to every token and
    cancels in the softmax. Values are applied after the attention weights, ``(P_h c) W_v,h^T + b_v,h``
    (the weights sum to one). Per cell this costs ``4 H K n d`` FLOPs instead of ``4 n d^2 + 4 K n d``,
    fewer whenever ``H K < d + K`` (the paper's 512 < 576), and never materialises the ``(n, 2 d)`` keys
    and values. The context is normalised once for all blocks (its RMSNorm weight is folded into the
    projections), the queries' and feed-forward RMSNorm weights are folded into the linear maps that
    follow them, and every matrix is cast once to ``dtype``. No dropout and no autograd (activations are
    updated in place): evaluation only.

    Parameters
    ----------
    block
        The block to evaluate.
    dtype
        Arithmetic of the matrix products (``torch.float32`` or ``torch.bfloat16``).
    """

    def __init__(self, block: CrossAttentionBlock, dtype: torch.dtype) -> None:
        attention = block.attention
        width = attention.to_q.in_features
        heads = attention.n_heads
        head_width = width // heads
        key_weight, value_weight = attention.to_kv.weight.split(width)
        context_weight = block.norm_context.weight
        self.block, self.dtype, self.heads = block, dtype, heads
        self.query_weight = (attention.to_q.weight * block.norm_queries.weight).to(dtype)
        self.query_bias = attention.to_q.bias.to(dtype)
        key_weight = key_weight.view(heads, head_width, width) * (context_weight * head_width**-0.5)
        self.key_weight = key_weight.to(dtype)  # (H, dh, d)
        self.value_weight = (value_weight * context_weight).view(heads, head_width, width).transpose(1, 2).to(dtype)
        self.value_bias = attention.to_kv.bias[width:].view(heads, 1, head_width).to(dtype)
        self.out_weight = attention.to_out.weight.to(dtype)
        self.out_bias = attention.to_out.bias.to(dtype)
        self.feed_forward = _FoldedFeedForward(block, dtype)

    def __call__(
        self,
        latents: torch.Tensor,
        unit_context: torch.Tensor,
        context_mask: torch.Tensor | None = None,
        workspace: Workspace | None = None,
    ) -> torch.Tensor:
        """Updated fp32 ``latents`` ``(batch, K, d)``.

        Parameters
        ----------
        latents
            Latent queries (not normalised), ``(batch, K, d)``.
        unit_context
            Context tokens divided by their RMS, ``(batch, n, d)`` in ``dtype``, shared by all blocks.
        context_mask
            Boolean ``(batch, n)``, ``True`` for tokens that may be attended to.
        workspace
            Buffers for the ``(batch, H K, n)`` attention scores and weights and the feed-forward layer, reused
            across calls.
        """
        batch, n_queries, width = latents.shape
        heads, head_width = self.heads, width // self.heads
        dtype, device = self.dtype, latents.device
        workspace = Workspace() if workspace is None else workspace
        unit = F.rms_norm(latents, (width,), eps=self.block.norm_queries.eps).to(dtype)
        queries = F.linear(unit, self.query_weight, self.query_bias)
        # One matrix product per head over all cells' queries: (H, batch K, dh) @ (H, dh, d).
        queries = queries.view(batch * n_queries, heads, head_width).transpose(0, 1)
        absorbed = torch.bmm(queries, self.key_weight).view(heads, batch, n_queries, width)
        absorbed = absorbed.transpose(0, 1).reshape(batch, heads * n_queries, width)
        scores_shape = (batch, heads * n_queries, unit_context.shape[1])
        scores = torch.bmm(
            absorbed, unit_context.transpose(1, 2), out=workspace.get("scores", scores_shape, dtype, device)
        )
        if context_mask is not None:
            scores.masked_fill_(~context_mask[:, None, :], float("-inf"))
        weights = torch.softmax(scores, dim=-1, out=workspace.get("weights", scores_shape, dtype, device))
        pooled = torch.bmm(weights, unit_context).view(batch, heads, n_queries, width)
        pooled = pooled.transpose(0, 1).reshape(heads, batch * n_queries, width)
        values = torch.baddbmm(self.value_bias, pooled, self.value_weight)  # (H, batch K, dh)
        values = values.transpose(0, 1).reshape(batch, n_queries, width)
        latents = latents + F.linear(values, self.out_weight, self.out_bias)
        return self.feed_forward.add_to(latents, workspace)
