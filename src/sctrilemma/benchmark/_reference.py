"""A deliberately plain reference implementation of the scTrilemma network, in the authors' layout.

:class:`UpstreamStyleVAE` re-states the architecture of :class:`~sctrilemma.module.SCTrilemmaModule`
the straightforward way, with the parameter names of the authors' released Lightning checkpoint
(``UpstreamStyleVAE().state_dict()`` keys, prefixed with ``"model."``, are the checkpoint's keys):

* :class:`torch.nn.MultiheadAttention` (``batch_first=True``) with a ``key_padding_mask``;
* the E-Gate evaluated per token as written, ``Linear(1, d)`` then ``Linear(d, d)`` then sigmoid,
  without collapsing the two linears;
* SwiGLU with separate gate and value linears;
* :class:`~torch.nn.BatchNorm1d` applied on ``(batch, d, K)``;
* every cell padded to the full crop size, one cell at a time, in fp32.

It is meant for equivalence tests and speed comparisons, not for training.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sctrilemma._normalize import TARGET_SUM

LOGVAR_MIN, LOGVAR_MAX = -4.0, 2.0
PAD_INDEX = 0


class GeneEmbedding(nn.Module):
    """Gene identity embedding ``(vocab, d)``; index 0 is ``<pad>``, 1 is ``<mask>``."""

    def __init__(self, n_input: int, n_hidden: int) -> None:
        super().__init__()
        self.gene_id_embedding = nn.Embedding(n_input, n_hidden)

    def forward(self, genes: torch.Tensor) -> torch.Tensor:
        """Embeddings ``(..., d)`` of gene indices ``(...)``."""
        return self.gene_id_embedding(genes)


class SwiGLUFeedForward(nn.Module):
    """``out_proj(dropout(silu(gate_proj(x)) * value_proj(x)))`` followed by dropout."""

    def __init__(self, n_hidden: int, n_ffn: int, dropout_rate: float) -> None:
        super().__init__()
        self.value_proj = nn.Linear(n_hidden, n_ffn)
        self.gate_proj = nn.Linear(n_hidden, n_ffn)
        self.out_proj = nn.Linear(n_ffn, n_hidden)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``x`` ``(..., d)``."""
        hidden = F.silu(self.gate_proj(x)) * self.value_proj(x)
        return self.dropout(self.out_proj(self.dropout(hidden)))


class CrossAttentionBlock(nn.Module):
    """Pre-norm cross-attention (queries over context) then SwiGLU, both residual."""

    def __init__(self, n_hidden: int, n_heads: int, dropout_rate: float, n_ffn: int) -> None:
        super().__init__()
        self.norm_q = nn.RMSNorm(n_hidden)
        self.norm_kv = nn.RMSNorm(n_hidden)
        self.attn = nn.MultiheadAttention(n_hidden, n_heads, dropout=dropout_rate, batch_first=True)
        self.norm_ff = nn.RMSNorm(n_hidden)
        self.ff = SwiGLUFeedForward(n_hidden, n_ffn, dropout_rate)

    def forward(
        self, queries: torch.Tensor, context: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Update ``queries`` ``(B, n, d)`` from ``context`` ``(B, m, d)``.

        ``key_padding_mask`` ``(B, m)`` is ``True`` at padding positions (PyTorch convention).
        """
        context = self.norm_kv(context)
        attended, _ = self.attn(
            self.norm_q(queries), context, context, key_padding_mask=key_padding_mask, need_weights=False
        )
        queries = queries + attended
        return queries + self.ff(self.norm_ff(queries))


class TokenBatchNorm(nn.Module):
    """BatchNorm over the ``d`` channels of latent tokens, applied on ``(B, d, K)``."""

    def __init__(self, n_hidden: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(n_hidden)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Normalise ``tokens`` ``(B, K, d)``."""
        return self.norm(tokens.transpose(1, 2)).transpose(1, 2)


class UpstreamStyleVAE(nn.Module):
    """Plain reference of the gene-token Perceiver VAE, with the authors' parameter names.

    Parameters
    ----------
    n_input
        Vocabulary size ``V``, including the ``<pad>`` (0) and ``<mask>`` (1) tokens.
    n_hidden
        Token width ``d``.
    n_latent_tokens
        Number ``K`` of latent queries.
    n_encoder_layers, n_decoder_layers
        Cross-attention blocks in the encoder and the decoder.
    n_heads
        Attention heads.
    dropout_rate
        Dropout on attention weights and in the feed-forward layers.
    ffn_multiplier
        SwiGLU hidden width as a multiple of ``n_hidden``.
    n_prior_codes
        Width ``M`` of the pseudo-bulk code of the PB-Cond prior.
    with_prior
        Whether to build the PB-Cond prior linears (``tissue_prior_mu``, ``tissue_prior_logvar``).
    """

    def __init__(
        self,
        n_input: int,
        *,
        n_hidden: int = 512,
        n_latent_tokens: int = 64,
        n_encoder_layers: int = 3,
        n_decoder_layers: int = 3,
        n_heads: int = 8,
        dropout_rate: float = 0.1,
        ffn_multiplier: float = 4.0,
        n_prior_codes: int = 32,
        with_prior: bool = True,
    ) -> None:
        super().__init__()
        n_ffn = int(ffn_multiplier * n_hidden)
        self.gene_embedding = GeneEmbedding(n_input, n_hidden)
        self.raw_proj = nn.Linear(1, n_hidden)
        self.expr_mod = nn.Linear(n_hidden, n_hidden)
        self.latent_queries = nn.Parameter(0.02 * torch.randn(1, n_latent_tokens, n_hidden))
        self.encoder_blocks = nn.ModuleList(
            [CrossAttentionBlock(n_hidden, n_heads, dropout_rate, n_ffn) for _ in range(n_encoder_layers)]
        )
        self.encoder_output_bn = TokenBatchNorm(n_hidden)
        self.mu_proj = nn.Linear(n_hidden, n_hidden)
        self.logvar_proj = nn.Linear(n_hidden, n_hidden)
        self.z_query_gate = nn.Sequential(nn.Linear(n_hidden, n_hidden), nn.GELU(), nn.Linear(n_hidden, n_hidden))
        self.decoder_blocks = nn.ModuleList(
            [CrossAttentionBlock(n_hidden, n_heads, dropout_rate, n_ffn) for _ in range(n_decoder_layers)]
        )
        self.output_proj = nn.Linear(n_hidden, 2)
        self.px_r = nn.Parameter(torch.zeros(n_input))
        if with_prior:
            self.tissue_prior_mu = nn.Linear(n_prior_codes, n_hidden)
            self.tissue_prior_logvar = nn.Linear(n_prior_codes, n_hidden)

    # ------------------------------------------------------------------ encoder
    @staticmethod
    def crop_cells(x: torch.Tensor, crop_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each cell's top-``crop_size`` expressed genes, padded to ``crop_size``, one cell at a time.

        Ties in the counts are broken by gene index (stable sort). Padding positions hold gene
        ``<pad>`` (index 0) with zero counts.

        Returns
        -------
        Gene indices ``(B, crop_size)``, their raw counts ``(B, crop_size)`` and the padding mask
        ``(B, crop_size)`` (``True`` at padding).
        """
        n_cells = x.shape[0]
        genes = torch.full((n_cells, crop_size), PAD_INDEX, dtype=torch.long)
        counts = torch.zeros(n_cells, crop_size, dtype=torch.float32)
        padding = torch.ones(n_cells, crop_size, dtype=torch.bool)
        for i in range(n_cells):
            row = x[i].float()
            expressed = torch.nonzero(row > 0).flatten()
            order = torch.sort(row[expressed], descending=True, stable=True).indices[:crop_size]
            keep = expressed[order]
            genes[i, : keep.numel()] = keep
            counts[i, : keep.numel()] = row[keep]
            padding[i, : keep.numel()] = False
        return genes, counts, padding

    def encode(self, x_counts_dense: torch.Tensor, crop_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and clamped log-variance of the latent tokens, each ``(B, K, d)``.

        Gene tokens are ``u_g * sigmoid(expr_mod(raw_proj(log1p(1e4 * x / library))))`` with the
        cell's total over all genes as ``library``.
        """
        x = x_counts_dense.float()
        library = x.sum(dim=1, keepdim=True)
        genes, counts, padding = self.crop_cells(x, crop_size)
        expression = torch.log1p(TARGET_SUM * counts / library)
        gate = torch.sigmoid(self.expr_mod(self.raw_proj(expression.unsqueeze(-1))))
        tokens = self.gene_embedding(genes) * gate
        latents = self.latent_queries.expand(x.shape[0], -1, -1)
        for block in self.encoder_blocks:
            latents = block(latents, tokens, key_padding_mask=padding)
        latents = self.encoder_output_bn(latents)
        return self.mu_proj(latents), self.logvar_proj(latents).clamp(LOGVAR_MIN, LOGVAR_MAX)

    def embed(self, x_counts_dense: torch.Tensor, crop_size: int) -> torch.Tensor:
        """Cell embeddings ``(B, d)``: the mean over ``K`` of the posterior-mean tokens."""
        mu, _ = self.encode(x_counts_dense, crop_size)
        return mu.mean(dim=1)

    # ------------------------------------------------------------------ decoder
    def decode_logits(self, z_tokens: torch.Tensor, pooled: torch.Tensor, genes: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, n, 2)`` (mean logit, zero-inflation logit) for the shared ``genes`` ``(n,)``.

        Decoder queries are ``u_g * sigmoid(z_query_gate(pooled))``; they attend to ``z_tokens`` ``(B, K, d)``.
        """
        gate = torch.sigmoid(self.z_query_gate(pooled)).unsqueeze(1)
        queries = self.gene_embedding(genes).unsqueeze(0) * gate
        for block in self.decoder_blocks:
            queries = block(queries, z_tokens)
        return self.output_proj(queries)

    # ------------------------------------------------------------------ prior
    def prior(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """PB-Cond prior mean and clamped log-variance ``(B, d)`` from pseudo-bulk codes ``(B, M)``."""
        return self.tissue_prior_mu(codes), self.tissue_prior_logvar(codes).clamp(LOGVAR_MIN, LOGVAR_MAX)
