"""The Perceiver encoder: a cell's gene tokens read by ``K`` latent queries into the token posteriors."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from sctrilemma._normalize import log1p_cp10k_tensor
from sctrilemma.module._inputs import GeneCrop
from sctrilemma.module._prior import LOGVAR_MAX, LOGVAR_MIN
from sctrilemma.nn import CrossAttentionBlock, ExpressionGate, LongContextBlock, RankSyncedBatchNorm1d
from sctrilemma.nn._attention import PreparedCache, Workspace
from sctrilemma.nn._layers import unit_rms

if TYPE_CHECKING:
    from sctrilemma.nn._layers import GeneEncoding

# Gene tokens (cells x positions) encoded at once in evaluation: bounds activation memory per batch.
EVAL_TOKEN_BUDGET = 8192


class PerceiverEncoder(nn.Module):
    """Gene tokens (E-Gate) read by ``K`` learned latent queries through cross-attention blocks.

    Each of a cell's cropped genes becomes a token, its embedding gated by its ``log1p(CP10K)``; the latent
    queries attend to the tokens, and after a BatchNorm two linear heads give each latent token's posterior mean
    and log-variance. The gene embeddings are also the decoder's gene queries.

    Parameters
    ----------
    n_genes
        Number of genes in the vocabulary.
    n_hidden
        Token width ``d``.
    n_latent_tokens
        Number ``K`` of latent queries.
    n_layers
        Cross-attention blocks.
    n_heads, dropout_rate, ffn_multiplier
        Of each :class:`~sctrilemma.nn.CrossAttentionBlock`.
    gene_encoding
        The :class:`~sctrilemma.nn.ExpressionGate`'s mode (``"gate"`` is the paper's).
    posterior_logvar_init
        Initial bias of the log-variance head (``0`` is PyTorch's default).

    Notes
    -----
    Training, or any call with autograd on, runs the plain blocks. Evaluation without autograd computes the same
    function faster: cells are grouped by their number of real tokens, so a group is padded only to its own longest
    cell, ``EVAL_TOKEN_BUDGET`` tokens at a time, and the blocks run as :class:`~sctrilemma.nn.LongContextBlock`
    (context normalised once and never projected) where that costs fewer FLOPs. The prepared blocks are built once
    and rebuilt only when the weights, the device or the arithmetic change.
    """

    def __init__(
        self,
        n_genes: int,
        n_hidden: int,
        n_latent_tokens: int,
        n_layers: int,
        *,
        n_heads: int,
        dropout_rate: float,
        ffn_multiplier: float,
        gene_encoding: GeneEncoding = "gate",
        posterior_logvar_init: float = 0.0,
    ) -> None:
        super().__init__()
        block_kwargs = {"n_heads": n_heads, "dropout_rate": dropout_rate, "ffn_multiplier": ffn_multiplier}
        self.gene_embedding = nn.Embedding(n_genes, n_hidden)  # N(0, 1) init, shared with the decoder
        self.expression_gate = ExpressionGate(n_hidden, gene_encoding=gene_encoding)
        self.latent_queries = nn.Parameter(0.02 * torch.randn(n_latent_tokens, n_hidden))
        self.blocks = nn.ModuleList([CrossAttentionBlock(n_hidden, **block_kwargs) for _ in range(n_layers)])
        self.posterior_norm = RankSyncedBatchNorm1d(n_hidden)  # global-batch statistics under DDP
        self.to_mean = nn.Linear(n_hidden, n_hidden)
        self.to_logvar = nn.Linear(n_hidden, n_hidden)
        if posterior_logvar_init != 0.0:
            nn.init.constant_(self.to_logvar.bias, posterior_logvar_init)
        self._prepared = PreparedCache()

    def train(self, mode: bool = True) -> PerceiverEncoder:
        """Set training mode; entering it drops the blocks prepared for evaluation (training changes the weights)."""
        if mode:
            self._prepared.clear()
        return super().train(mode)

    @property
    def n_latent_tokens(self) -> int:
        """Number ``K`` of latent tokens."""
        return self.latent_queries.shape[0]

    def forward(
        self, crop: GeneCrop, library: torch.Tensor, eval_dtype: torch.dtype = torch.float32
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and clamped log-variance of the ``K`` latent tokens, each ``(batch, K, n_hidden)``.

        ``library`` ``(batch, 1)`` is the whole-cell raw total used for ``log1p(CP10K)``. ``eval_dtype``
        (``torch.float32`` or ``torch.bfloat16``) is the arithmetic of evaluation; training runs in the caller's
        (fp32, or bf16 under ``bf16-mixed`` autocast).
        """
        if self.training or torch.is_grad_enabled():
            latents = self._encode_plain(crop, library)
        else:
            latents = self._encode_fast(crop, library, eval_dtype)
        batch, n_tokens, width = latents.shape
        latents = self.posterior_norm(latents.reshape(batch * n_tokens, width)).view(batch, n_tokens, width)
        # fp32 even under autocast: the KL term and the decoder's context norm want full precision.
        return self.to_mean(latents).float(), self.to_logvar(latents).float().clamp(LOGVAR_MIN, LOGVAR_MAX)

    def tokens(self, crop: GeneCrop, library: torch.Tensor) -> torch.Tensor:
        """The gene tokens ``(batch, n, d)``: each gene's embedding gated by its ``log1p(CP10K)``."""
        return self.expression_gate(self.gene_embedding(crop.genes), log1p_cp10k_tensor(crop.counts, library))

    def _encode_plain(self, crop: GeneCrop, library: torch.Tensor) -> torch.Tensor:
        tokens = self.tokens(crop, library)
        latents = self.latent_queries.expand(tokens.shape[0], -1, -1)
        eps = {block.norm_context.eps for block in self.blocks}
        if len(eps) == 1:  # normalise the long context once for all blocks (the same function)
            unit_context = unit_rms(tokens, eps.pop())
            for block in self.blocks:
                latents = block(latents, unit_context, crop.mask, unit_context=True)
            return latents
        for block in self.blocks:
            latents = block(latents, tokens, crop.mask)
        return latents

    def _encode_fast(self, crop: GeneCrop, library: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The plain blocks' latents, by groups of cells of similar length (see the class notes)."""
        batch, width = crop.genes.shape
        if crop.mask is None:
            n_real = torch.full((batch,), width, device=crop.genes.device)
        else:
            n_real = crop.mask.sum(1)
            # Groups are cut to their longest cell, which needs the real positions first in each row.
            if not torch.equal(crop.mask, torch.arange(width, device=n_real.device) < n_real[:, None]):
                n_real = torch.full_like(n_real, width)
        order = torch.argsort(n_real, stable=True)
        sorted_lengths = n_real[order].tolist()
        blocks = self._prepared_blocks(dtype, crop.genes.device)
        workspace = Workspace()
        latents = torch.empty(batch, self.n_latent_tokens, self.latent_queries.shape[1], device=crop.genes.device)
        start = 0
        while start < batch:
            stop = start + 1
            while stop < batch and (stop + 1 - start) * sorted_lengths[stop] <= EVAL_TOKEN_BUDGET:
                stop += 1
            cells, length = order[start:stop], max(1, sorted_lengths[stop - 1])
            group = GeneCrop(
                crop.genes[cells, :length],
                crop.counts[cells, :length],
                None if crop.mask is None or bool(crop.mask[cells, :length].all()) else crop.mask[cells, :length],
            )
            latents[cells] = self._encode_group(group, library[cells], blocks, workspace, dtype)
            start = stop
        return latents

    def _prepared_blocks(self, dtype: torch.dtype, device: torch.device) -> list[LongContextBlock] | None:
        """The blocks as :class:`~sctrilemma.nn.LongContextBlock`, or ``None`` where that costs more; cached."""
        plain_flops, absorbed_flops = self.blocks[0].attention.context_flops(self.n_latent_tokens, 1)
        if absorbed_flops >= plain_flops or len({block.norm_context.eps for block in self.blocks}) > 1:
            return None
        return self._prepared.get(
            self.blocks.parameters(), dtype, device, lambda: [LongContextBlock(block, dtype) for block in self.blocks]
        )

    def _encode_group(
        self,
        crop: GeneCrop,
        library: torch.Tensor,
        blocks: list[LongContextBlock] | None,
        workspace: Workspace,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        if blocks is None:
            device = crop.genes.device
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
                return self._encode_plain(crop, library).float()
        n_hidden = self.gene_embedding.embedding_dim
        weight = self.gene_embedding.weight
        tokens = workspace.get("tokens", (*crop.genes.shape, n_hidden), weight.dtype, weight.device)
        torch.index_select(weight, 0, crop.genes.reshape(-1), out=tokens.view(-1, n_hidden))
        tokens = self.expression_gate(tokens, log1p_cp10k_tensor(crop.counts, library), inplace=True)
        context = workspace.get("context", tokens.shape, blocks[0].dtype, tokens.device)
        unit_context = unit_rms(tokens, self.blocks[0].norm_context.eps, out=context)
        latents = self.latent_queries.expand(tokens.shape[0], -1, -1)
        for block in blocks:
            latents = block(latents, unit_context, crop.mask, workspace)
        return latents
