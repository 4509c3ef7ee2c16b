"""The exact fast paths of evaluation: the encoder by groups of similar cells, the decoder by groups of queries."""

from __future__ import annotations

import torch

from sctrilemma._normalize import log1p_cp10k_tensor
from sctrilemma.module._tokens import GeneCrop
from sctrilemma.nn import LongContextBlock, ShortContextBlock
from sctrilemma.nn._attention import Workspace
from sctrilemma.nn._norm import unit_rms

# Gene tokens (cells x positions) encoded at once in evaluation: bounds activation memory per batch.
EVAL_TOKEN_BUDGET = 8192
# Gene queries (cells x genes) decoded at once in evaluation: a few cells' genes per chunk for the small preset,
# the fastest of 2,048-131,072 measured on Kang 2018; the paper preset decodes as fast at 2,048 or 8,192
# (benchmarks/results/speed/NOTES.md).
DECODE_TOKEN_BUDGET = 8192
# Floats of the decoder blocks' folded keys and values held at once in evaluation: the small preset folds a whole
# batch of cells at once, the paper preset a few cells at a time.
FOLDED_CONTEXT_BUDGET = 1 << 22


class FastEvalMixin:
    """:meth:`encode` and :meth:`decode` in evaluation without autograd: the same functions, computed faster.

    Used by :class:`~sctrilemma.module.SCTrilemmaModule`, whose attributes (blocks, gene embeddings, precision) they read.
    """

    def _encode_grouped(self, crop: GeneCrop, library: torch.Tensor) -> torch.Tensor:
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
        blocks = self._long_context_blocks(torch.bfloat16 if self.uses_bf16(crop.genes.device) else torch.float32)
        workspace = Workspace()
        latents = torch.empty(batch, self.n_latent_tokens, self.n_hidden, device=crop.genes.device)
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
            latents[cells] = self._encode_group(group, library[cells], blocks, workspace)
            start = stop
        return latents

    def _long_context_blocks(self, dtype: torch.dtype) -> list[LongContextBlock] | None:
        """The encoder blocks prepared as :class:`~sctrilemma.nn.LongContextBlock`, or ``None`` where that costs more."""
        plain_flops, absorbed_flops = self.encoder[0].attention.context_flops(self.n_latent_tokens, 1)
        shared_eps = len({block.norm_context.eps for block in self.encoder}) == 1
        if absorbed_flops >= plain_flops or not shared_eps:
            return None
        return [LongContextBlock(block, dtype) for block in self.encoder]

    def _encode_group(
        self, crop: GeneCrop, library: torch.Tensor, blocks: list[LongContextBlock] | None, workspace: Workspace
    ) -> torch.Tensor:
        if blocks is None:
            with self._eval_autocast(crop.genes.device):
                return self._encode_plain(crop, library).float()
        shape = (*crop.genes.shape, self.n_hidden)
        weight = self.gene_embedding.weight
        tokens = workspace.get("tokens", shape, weight.dtype, weight.device)
        torch.index_select(weight, 0, crop.genes.reshape(-1), out=tokens.view(-1, self.n_hidden))
        tokens = self.expression_gate(tokens, log1p_cp10k_tensor(crop.counts, library), inplace=True)
        context = workspace.get("context", tokens.shape, blocks[0].dtype, tokens.device)
        unit_context = unit_rms(tokens, self.encoder[0].norm_context.eps, out=context)
        latents = self.latent_queries.expand(tokens.shape[0], -1, -1)
        for block in blocks:
            latents = block(latents, unit_context, crop.mask, workspace)
        return latents

    def _decode_eval(self, z_tokens: torch.Tensor, pooled_sample: torch.Tensor, genes: torch.Tensor) -> torch.Tensor:
        """:meth:`decode` in evaluation: groups of cells and genes of about ``DECODE_TOKEN_BUDGET`` queries.

        Genes do not attend to each other, so splitting them gives the same logits. The gene queries'
        embeddings are looked up once per call, and each block's keys and values folded for up to
        ``FOLDED_CONTEXT_BUDGET`` floats of cells at a time. Where it is cheaper, the blocks run as
        :class:`~sctrilemma.nn.ShortContextBlock` (keys and values folded into the projections, the count head
        into the last feed-forward layer); otherwise the plain blocks run.
        """
        batch, n_genes = z_tokens.shape[0], genes.shape[-1]
        plain_flops, folded_flops = self.decoder[0].attention.short_context_flops(n_genes, z_tokens.shape[1])
        cells_per_group = max(1, DECODE_TOKEN_BUDGET // max(1, n_genes))
        genes_per_chunk = max(1, DECODE_TOKEN_BUDGET // cells_per_group)
        logits = torch.empty(batch, n_genes, 2, device=z_tokens.device)
        if folded_flops >= plain_flops:
            genes = genes.expand(batch, n_genes) if genes.dim() == 1 else genes
            for start in range(0, batch, cells_per_group):
                cells = slice(start, start + cells_per_group)
                for gene_start in range(0, n_genes, genes_per_chunk):
                    chunk = slice(gene_start, gene_start + genes_per_chunk)
                    logits[cells, chunk] = self._decode_plain(
                        z_tokens[cells], pooled_sample[cells], genes[cells, chunk]
                    )
            return logits
        dtype = torch.bfloat16 if self.uses_bf16(z_tokens.device) else torch.float32
        *blocks, last = self.decoder
        blocks = [ShortContextBlock(block, dtype) for block in blocks]
        blocks.append(ShortContextBlock(last, dtype, readout=self.count_head))
        embeddings = self.decoder_gene_embedding(genes).float()
        modulation = self.query_router.modulation(pooled_sample)
        workspace = Workspace()
        folded_per_cell = 2 * self.n_hidden * self.decoder[0].attention.n_heads * z_tokens.shape[1] * len(blocks)
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
