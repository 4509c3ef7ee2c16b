"""The ZINB decoder: gene queries (C-Route) read the latent tokens into each gene's zero-inflated negative binomial."""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from scvi.distributions import ZeroInflatedNegativeBinomial
from torch import nn

from sctrilemma.nn import CrossAttentionBlock, QueryRouter, ShortContextBlock
from sctrilemma.nn._attention import PreparedCache, Workspace

if TYPE_CHECKING:
    from sctrilemma.nn._layers import DecoderQuery

# Gene queries decoded at once in CPU training: one group's activations stay in cache from one operator to the
# next, forward and backward (measured 12-16 % off a small-preset step; benchmarks/speed_tricks.py).
TRAINING_DECODE_BUDGET = 8192
# Gene queries (cells x genes) decoded at once in evaluation, counted in floats of query width: 8,192 queries of the
# small preset's 64, a few cells' genes per chunk (the fastest of 2,048-131,072 measured on Kang 2018), and 1,024 of
# the paper preset's 512, which decodes as fast at 512-8,192 queries and at 1,024 holds a quarter of the memory it
# holds at 8,192.
DECODE_FLOAT_BUDGET = 1 << 19
# Floats of the blocks' folded keys and values held at once in evaluation: the small preset folds a whole batch
# of cells at once, the paper preset a few cells at a time.
FOLDED_CONTEXT_BUDGET = 1 << 22


class ZINBDecoder(nn.Module):
    """Gene queries routed by the pooled sample and updated by cross-attention to the ``K`` latent tokens.

    Each gene's query is its embedding (read from the encoder's table, plus an offset of the decoder's own if
    ``gene_offset``), modulated by the cell's pooled sample (C-Route). After the blocks a linear count head gives
    each gene a mean logit and a zero-inflation logit; :meth:`count_distribution` turns them, with a dispersion
    per gene, into the ZINB.

    Parameters
    ----------
    n_genes
        Number of genes in the vocabulary.
    n_hidden
        Query width ``d``.
    n_layers
        Cross-attention blocks.
    n_heads, dropout_rate, ffn_multiplier
        Of each :class:`~sctrilemma.nn.CrossAttentionBlock`.
    decoder_query
        The :class:`~sctrilemma.nn.QueryRouter`'s mode (``"gate"`` is the paper's).
    gene_offset
        Give the decoder an offset per gene (zero at the start) added to the shared gene embeddings, which it then
        reads without training them.

    Notes
    -----
    Training, or any call with autograd on, runs the plain blocks, on CPU ``TRAINING_DECODE_BUDGET`` queries at a
    time. Evaluation without autograd computes the same logits faster: genes do not attend to each other, so cells
    and genes are cut into chunks of about ``DECODE_FLOAT_BUDGET / d`` queries, the gene embeddings are looked up once
    per call, and where it costs fewer FLOPs the blocks run as :class:`~sctrilemma.nn.ShortContextBlock`: each cell's keys
    and values folded into the projections (for up to ``FOLDED_CONTEXT_BUDGET`` floats of cells at a time), the count
    head into the last feed-forward layer. The prepared blocks are built once and rebuilt only when the weights, the
    device or the arithmetic change.
    """

    def __init__(
        self,
        n_genes: int,
        n_hidden: int,
        n_layers: int,
        *,
        n_heads: int,
        dropout_rate: float,
        ffn_multiplier: float,
        decoder_query: DecoderQuery = "gate",
        gene_offset: bool = False,
    ) -> None:
        super().__init__()
        block_kwargs = {"n_heads": n_heads, "dropout_rate": dropout_rate, "ffn_multiplier": ffn_multiplier}
        self.query_router = QueryRouter(n_hidden, decoder_query=decoder_query)
        self.blocks = nn.ModuleList([CrossAttentionBlock(n_hidden, **block_kwargs) for _ in range(n_layers)])
        self.count_head = nn.Linear(n_hidden, 2)
        self.px_r = nn.Parameter(torch.zeros(n_genes))
        self.gene_offset = None
        if gene_offset:  # zero at the start, drawing no random numbers (other weights start unchanged)
            self.gene_offset = nn.Embedding.from_pretrained(torch.zeros(n_genes, n_hidden), freeze=False)
        self._prepared = PreparedCache()

    def train(self, mode: bool = True) -> ZINBDecoder:
        """Set training mode; entering it drops the blocks prepared for evaluation (training changes the weights)."""
        if mode:
            self._prepared.clear()
        return super().train(mode)

    def gene_queries(self, genes: torch.Tensor, gene_embedding: nn.Embedding) -> torch.Tensor:
        """The gene queries' embeddings: the shared table's rows, or their values plus the decoder's offsets."""
        if self.gene_offset is None:
            return gene_embedding(genes)
        return gene_embedding(genes).detach() + self.gene_offset(genes)

    def forward(
        self,
        z_tokens: torch.Tensor,
        pooled_sample: torch.Tensor,
        genes: torch.Tensor,
        gene_embedding: nn.Embedding,
        eval_dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """Logits ``(batch, n, 2)`` (mean logit, zero-inflation logit) of ``genes``.

        ``z_tokens`` ``(batch, K, d)`` are the latent tokens and ``pooled_sample`` ``(batch, d)`` their pooled
        sample; ``genes`` is ``(batch, n)`` (per-cell targets) or ``(n,)`` (the same genes for every cell);
        ``gene_embedding`` is the encoder's table. ``eval_dtype`` (``torch.float32`` or ``torch.bfloat16``) is
        the arithmetic of evaluation; training runs in the caller's (fp32, or bf16 under ``bf16-mixed`` autocast).
        """
        if self.training or torch.is_grad_enabled():
            return self._decode_plain(z_tokens, pooled_sample, genes, gene_embedding, eval_dtype)
        return self._decode_fast(z_tokens, pooled_sample, genes, gene_embedding, eval_dtype)

    def _decode_plain(
        self,
        z_tokens: torch.Tensor,
        pooled_sample: torch.Tensor,
        genes: torch.Tensor,
        gene_embedding: nn.Embedding,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        batch, n_genes = z_tokens.shape[0], genes.shape[-1]
        if z_tokens.device.type == "cpu" and batch * n_genes > TRAINING_DECODE_BUDGET:
            genes = genes.expand(batch, n_genes) if genes.dim() == 1 else genes
            step = max(1, TRAINING_DECODE_BUDGET // n_genes)
            groups = [slice(start, start + step) for start in range(0, batch, step)]
            decoded = [
                self._decode_group(z_tokens[g], pooled_sample[g], genes[g], gene_embedding, dtype) for g in groups
            ]
            return torch.cat(decoded)
        return self._decode_group(z_tokens, pooled_sample, genes, gene_embedding, dtype)

    def _decode_group(
        self,
        z_tokens: torch.Tensor,
        pooled_sample: torch.Tensor,
        genes: torch.Tensor,
        gene_embedding: nn.Embedding,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        # Training keeps the caller's autocast (Lightning's bf16-mixed); evaluation runs in ``dtype``.
        arithmetic = torch.autocast(z_tokens.device.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)
        with nullcontext() if self.training else arithmetic:
            embeddings = self.gene_queries(genes, gene_embedding)
            queries = self.query_router(embeddings, self.query_router.modulation(pooled_sample))
            if queries.dim() == 2:
                queries = queries.expand(z_tokens.shape[0], -1, -1)
            for block in self.blocks[:-1]:
                queries = block(queries, z_tokens)
            if self.training:  # the count head folded into the last block (the same function, cheaper)
                return self.blocks[-1](queries, z_tokens, readout=self.count_head)
            queries = self.blocks[-1](queries, z_tokens)
        return self.count_head(queries.to(self.count_head.weight.dtype))

    def _prepared_blocks(self, dtype: torch.dtype, device: torch.device) -> list[ShortContextBlock]:
        """The blocks as :class:`~sctrilemma.nn.ShortContextBlock`, the count head folded into the last; cached."""

        def build() -> list[ShortContextBlock]:
            *blocks, last = self.blocks
            prepared = [ShortContextBlock(block, dtype) for block in blocks]
            return [*prepared, ShortContextBlock(last, dtype, readout=self.count_head)]

        parameters = (*self.blocks.parameters(), *self.count_head.parameters())
        return self._prepared.get(parameters, dtype, device, build)

    def _decode_fast(
        self,
        z_tokens: torch.Tensor,
        pooled_sample: torch.Tensor,
        genes: torch.Tensor,
        gene_embedding: nn.Embedding,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        """The plain blocks' logits, by chunks of cells and genes (see the class notes)."""
        batch, n_genes = z_tokens.shape[0], genes.shape[-1]
        plain_flops, folded_flops = self.blocks[0].attention.short_context_flops(n_genes, z_tokens.shape[1])
        query_budget = max(1, DECODE_FLOAT_BUDGET // z_tokens.shape[-1])
        cells_per_group = max(1, query_budget // max(1, n_genes))
        genes_per_chunk = max(1, query_budget // cells_per_group)
        logits = torch.empty(batch, n_genes, 2, device=z_tokens.device)
        if folded_flops >= plain_flops:
            genes = genes.expand(batch, n_genes) if genes.dim() == 1 else genes
            for start in range(0, batch, cells_per_group):
                cells = slice(start, start + cells_per_group)
                for gene_start in range(0, n_genes, genes_per_chunk):
                    chunk = slice(gene_start, gene_start + genes_per_chunk)
                    logits[cells, chunk] = self._decode_plain(
                        z_tokens[cells], pooled_sample[cells], genes[cells, chunk], gene_embedding, dtype
                    )
            return logits
        blocks = self._prepared_blocks(dtype, z_tokens.device)
        embeddings = self.gene_queries(genes, gene_embedding).float()
        modulation = self.query_router.modulation(pooled_sample)
        workspace = Workspace()
        folded_per_cell = 2 * z_tokens.shape[2] * self.blocks[0].attention.n_heads * z_tokens.shape[1] * len(blocks)
        cells_per_fold = max(1, FOLDED_CONTEXT_BUDGET // folded_per_cell // cells_per_group) * cells_per_group
        for fold_start in range(0, batch, cells_per_fold):
            for block in blocks:
                block.set_context(z_tokens[fold_start : fold_start + cells_per_fold])
            for start in range(fold_start, min(batch, fold_start + cells_per_fold), cells_per_group):
                cells = slice(start, start + cells_per_group)
                folded = slice(start - fold_start, start - fold_start + cells_per_group)
                n_cells = min(batch, start + cells_per_group) - start
                for gene_start in range(0, n_genes, genes_per_chunk):
                    chunk = slice(gene_start, gene_start + genes_per_chunk)
                    embedding = embeddings[chunk] if genes.dim() == 1 else embeddings[cells, chunk]
                    routed = self.query_router(embedding, None if modulation is None else modulation[cells])
                    queries = workspace.get("queries", (n_cells, *routed.shape[-2:]), torch.float32, routed.device)
                    queries.copy_(routed)  # the blocks update it in place
                    for block in blocks:
                        queries = block(queries, workspace, folded)
                    logits[cells, chunk] = queries
        return logits

    def count_distribution(
        self,
        logits: torch.Tensor,
        genes: torch.Tensor | None,
        library: torch.Tensor,
        weights: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> ZeroInflatedNegativeBinomial:
        """The ZINB of the decoder's ``logits`` ``(..., n, 2)`` for ``genes`` (``None``: every gene, in order).

        Without ``weights`` the proportions are the softmax over the ``n`` genes; with the Horvitz-Thompson
        ``weights`` of a :func:`~sctrilemma.module.target_sample`, proportions of the whole transcriptome whose
        normaliser is estimated from the weighted genes. The mean is the proportions times ``library``
        ``(..., 1)``. Genes outside ``mask`` get proportion 0 and a finite mean (their NLL is unused).
        """
        mean_logit, zi_logit = logits.unbind(-1)
        if mask is not None:
            mean_logit = mean_logit.masked_fill(~mask, float("-inf"))
        if weights is None:
            proportions = torch.softmax(mean_logit, dim=-1)
        else:  # log sum_g w_g exp(logit_g), the estimated log normaliser over all genes
            log_normaliser = torch.logsumexp(mean_logit + weights.log(), dim=-1, keepdim=True)
            proportions = torch.exp(mean_logit - log_normaliser)
        mean = proportions * library.to(proportions.device)
        if mask is not None:
            mean = torch.where(mask, mean, torch.ones_like(mean))
        dispersion = F.softplus(self.px_r.to(torch.promote_types(self.px_r.dtype, proportions.dtype)))
        return ZeroInflatedNegativeBinomial(
            mu=mean,
            theta=dispersion.expand_as(mean) if genes is None else dispersion[genes],
            zi_logits=zi_logit,
            scale=proportions,
        )
