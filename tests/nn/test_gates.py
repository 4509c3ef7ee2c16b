from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sctrilemma.nn import ExpressionGate, QueryRouter, TokenPooling

N_HIDDEN = 32


def _expression(*shape: int) -> torch.Tensor:
    # log1p(CP10K)-like values, with exact zeros.
    x = torch.log1p(1e4 * torch.poisson(2.0 * torch.rand(*shape)) / 500.0)
    return x


def test_gate_equals_naive_two_linear_evaluation() -> None:
    torch.manual_seed(0)
    gate = ExpressionGate(N_HIDDEN, gene_encoding="gate")
    u, x = torch.randn(3, 50, N_HIDDEN), _expression(3, 50)
    assert (x == 0).any()
    assert x.max() > 3
    naive = u * torch.sigmoid(gate.gate(gate.expr_proj(x[..., None])))
    out = gate(u, x)
    assert out.shape == u.shape
    torch.testing.assert_close(out, naive, rtol=0.0, atol=1e-5)


def test_gate_affine_is_the_composed_map() -> None:
    torch.manual_seed(1)
    gate = ExpressionGate(N_HIDDEN)
    slope, intercept = gate.affine()
    x = torch.linspace(-2, 8, 13)
    torch.testing.assert_close(
        x[:, None] * slope + intercept, gate.gate(gate.expr_proj(x[:, None])), rtol=0.0, atol=1e-5
    )


def test_gate_token_norm_is_bounded_by_gene_embedding_norm() -> None:
    torch.manual_seed(2)
    gate = ExpressionGate(N_HIDDEN)
    with torch.no_grad():  # a large gate, so that sigmoid saturates for some features
        gate.gate.weight.mul_(20.0)
        gate.gate.bias.add_(5.0)
    u, x = torch.randn(4, 64, N_HIDDEN), _expression(4, 64)
    e = gate(u, x)
    assert (e.norm(dim=-1) <= u.norm(dim=-1)).all()
    assert e.shape == (4, 64, N_HIDDEN)


def test_additive_equals_sum() -> None:
    torch.manual_seed(3)
    gate = ExpressionGate(N_HIDDEN, gene_encoding="additive")
    assert gate.gate is None
    u, x = torch.randn(2, 30, N_HIDDEN), _expression(2, 30)
    torch.testing.assert_close(gate(u, x), u + gate.expr_proj(x[..., None]), rtol=0.0, atol=1e-5)


def test_gate_invalid_option() -> None:
    with pytest.raises(ValueError, match="gene_encoding"):
        ExpressionGate(N_HIDDEN, gene_encoding="multiplicative")


@pytest.mark.parametrize("per_cell_genes", [True, False])
def test_query_router_gate(per_cell_genes: bool) -> None:
    torch.manual_seed(4)
    router = QueryRouter(N_HIDDEN, decoder_query="gate")
    s = torch.randn(3, N_HIDDEN)
    u = torch.randn(3, 20, N_HIDDEN) if per_cell_genes else torch.randn(20, N_HIDDEN)
    h = router.mlp[2](F.gelu(router.mlp[0](s)))
    modulation = router.modulation(s)
    assert modulation.shape == (3, 1, N_HIDDEN)
    queries = router(u, modulation)
    assert queries.shape == (3, 20, N_HIDDEN)
    torch.testing.assert_close(queries, u * torch.sigmoid(h)[:, None, :], rtol=0.0, atol=1e-6)
    assert (queries.norm(dim=-1) <= u.norm(dim=-1)).all()


def test_query_router_additive() -> None:
    torch.manual_seed(5)
    router = QueryRouter(N_HIDDEN, decoder_query="additive")
    s, u = torch.randn(3, N_HIDDEN), torch.randn(3, 20, N_HIDDEN)
    h = router.mlp[2](F.gelu(router.mlp[0](s)))
    torch.testing.assert_close(router(u, router.modulation(s)), u + h[:, None, :], rtol=0.0, atol=1e-6)


def test_query_router_none() -> None:
    router = QueryRouter(N_HIDDEN, decoder_query="none")
    assert router.mlp is None
    assert not list(router.parameters())
    s, u = torch.randn(3, N_HIDDEN), torch.randn(3, 20, N_HIDDEN)
    assert router.modulation(s) is None
    assert torch.equal(router(u, router.modulation(s)), u)


def test_query_router_invalid_option() -> None:
    with pytest.raises(ValueError, match="decoder_query"):
        QueryRouter(N_HIDDEN, decoder_query="concat")


def test_mean_pooling() -> None:
    pool = TokenPooling(N_HIDDEN, pooling="mean")
    tokens = torch.randn(2, 3, 8, N_HIDDEN)
    assert pool.score is None
    assert torch.equal(pool(tokens), tokens.mean(-2))


def test_attention_pooling_weights_sum_to_one() -> None:
    torch.manual_seed(6)
    pool = TokenPooling(N_HIDDEN, pooling="attention")
    tokens = torch.randn(5, 8, N_HIDDEN)
    weights = torch.softmax(pool.score(tokens), dim=-2)
    torch.testing.assert_close(weights.sum(-2), torch.ones(5, 1))
    pooled = pool(tokens)
    assert pooled.shape == (5, N_HIDDEN)
    torch.testing.assert_close(pooled, (weights * tokens).sum(-2))
    # A convex combination: identical tokens pool to that token.
    same = tokens[:, :1].expand(-1, 8, -1)
    torch.testing.assert_close(pool(same), tokens[:, 0], rtol=1e-5, atol=1e-6)
    # Not simply the mean.
    assert not torch.allclose(pooled, tokens.mean(-2), atol=1e-4)


def test_pooling_invalid_option() -> None:
    with pytest.raises(ValueError, match="pooling"):
        TokenPooling(N_HIDDEN, pooling="max")
