"""E-Gate (expression-gated gene tokens) and C-Route (pooling and decoder-query routing)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

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
