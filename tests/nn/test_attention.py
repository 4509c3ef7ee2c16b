from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sctrilemma.nn import CrossAttention, CrossAttentionBlock, LongContextBlock, ShortContextBlock, SwiGLU
from sctrilemma.nn._attention import Workspace
from sctrilemma.nn._layers import gated_silu, unit_rms

N_HIDDEN, N_HEADS = 32, 4


@pytest.fixture(params=["attention", "block"])
def layer(request: pytest.FixtureRequest) -> torch.nn.Module:
    torch.manual_seed(0)
    if request.param == "attention":
        return CrossAttention(N_HIDDEN, n_heads=N_HEADS).eval()
    return CrossAttentionBlock(N_HIDDEN, n_heads=N_HEADS, dropout_rate=0.0).eval()


def test_output_shape(layer: torch.nn.Module) -> None:
    queries, context = torch.randn(3, 5, N_HIDDEN), torch.randn(3, 17, N_HIDDEN)
    out = layer(queries, context)
    assert out.shape == (3, 5, N_HIDDEN)
    assert torch.isfinite(out).all()


def test_block_output_shape_with_mask() -> None:
    block = CrossAttentionBlock(N_HIDDEN, n_heads=N_HEADS, dropout_rate=0.1, ffn_multiplier=2.0)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, 4:] = False
    assert block(torch.randn(2, 6, N_HIDDEN), torch.randn(2, 9, N_HIDDEN), mask).shape == (2, 6, N_HIDDEN)
    assert block.ffn.proj_in.out_features == 2 * 2 * N_HIDDEN


def test_cross_attention_matches_manual_multihead() -> None:
    torch.manual_seed(1)
    attention = CrossAttention(N_HIDDEN, n_heads=N_HEADS).eval()
    queries, context = torch.randn(2, 3, N_HIDDEN), torch.randn(2, 7, N_HIDDEN)
    head = N_HIDDEN // N_HEADS
    q = attention.to_q(queries)
    k, v = attention.to_kv(context).chunk(2, dim=-1)
    outs = []
    for h in range(N_HEADS):
        sl = slice(h * head, (h + 1) * head)
        scores = q[..., sl] @ k[..., sl].transpose(-1, -2) / math.sqrt(head)
        outs.append(torch.softmax(scores, dim=-1) @ v[..., sl])
    expected = attention.to_out(torch.cat(outs, dim=-1))
    torch.testing.assert_close(attention(queries, context), expected, rtol=1e-5, atol=1e-5)


def test_padded_context_positions_are_ignored(layer: torch.nn.Module) -> None:
    queries, context = torch.randn(2, 4, N_HIDDEN), torch.randn(2, 10, N_HIDDEN)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[0, 7:] = False
    mask[1, 3:] = False
    changed = context.clone()
    changed[~mask] = 100.0 * torch.randn(int((~mask).sum()), N_HIDDEN)
    with torch.no_grad():
        out = layer(queries, context, mask)
        out_changed = layer(queries, changed, mask)
        unmasked = layer(queries, changed)
    torch.testing.assert_close(out_changed, out, rtol=0.0, atol=1e-6)
    # Without the mask the same change does reach the output (the check above is not vacuous).
    assert not torch.allclose(unmasked, out, atol=1e-3)


def test_queries_do_not_interact(layer: torch.nn.Module) -> None:
    queries, context = torch.randn(2, 6, N_HIDDEN), torch.randn(2, 11, N_HIDDEN)
    changed = queries.clone()
    changed[:, 2] = 10.0 * torch.randn(2, N_HIDDEN)
    with torch.no_grad():
        out, out_changed = layer(queries, context), layer(changed, context)
        alone = layer(queries[:, :1], context)
    keep = [0, 1, 3, 4, 5]
    torch.testing.assert_close(out_changed[:, keep], out[:, keep], rtol=0.0, atol=1e-6)
    assert not torch.allclose(out_changed[:, 2], out[:, 2], atol=1e-3)
    # A single query gives the same output as within a set of queries: no n_queries x n_queries attention.
    torch.testing.assert_close(alone[:, 0], out[:, 0], rtol=1e-5, atol=1e-6)


def test_heads_must_divide_width() -> None:
    with pytest.raises(ValueError, match="divisible"):
        CrossAttention(30, n_heads=4)


def test_swiglu_formula_and_shape() -> None:
    torch.manual_seed(2)
    ffn = SwiGLU(N_HIDDEN, n_ffn=3 * N_HIDDEN).eval()
    x = torch.randn(4, 5, N_HIDDEN)
    w1, w3 = ffn.proj_in.weight.chunk(2, dim=0)
    b1, b3 = ffn.proj_in.bias.chunk(2)
    expected = ffn.proj_out(F.silu(x @ w1.T + b1) * (x @ w3.T + b3))
    out = ffn(x)
    assert out.shape == x.shape
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("masked", [False, True])
def test_absorbed_attention_matches_projected_context(masked: bool, perturb_norms_and_biases) -> None:
    torch.manual_seed(0)
    block = CrossAttentionBlock(32, n_heads=4, dropout_rate=0.1).eval()
    perturb_norms_and_biases(block)
    queries, context = torch.randn(3, 5, 32), 2.0 * torch.randn(3, 11, 32)
    mask = torch.arange(11) < torch.tensor([[11], [7], [1]]) if masked else None
    with torch.no_grad():
        expected = block(queries, context, mask)
        absorbed = LongContextBlock(block, torch.float32)(queries, unit_rms(context), mask)
    torch.testing.assert_close(absorbed, expected, rtol=1e-5, atol=1e-5)
    plain, cheaper = block.attention.context_flops(n_queries=5, n_context=11)
    assert cheaper == 4 * 4 * 5 * 11 * 32
    assert plain == 4 * 11 * 32 * 32 + 4 * 5 * 11 * 32


def test_short_context_block_matches_the_block(perturb_norms_and_biases) -> None:
    """Keys and values folded into the projections per cell give the block's output, and bf16 stays close."""
    torch.manual_seed(0)
    block = CrossAttentionBlock(32, n_heads=4, dropout_rate=0.1).eval()
    perturb_norms_and_biases(block)
    queries, context = torch.randn(3, 40, 32), 2.0 * torch.randn(3, 4, 32)
    with torch.no_grad():
        expected = block(queries, context)
        folded = ShortContextBlock(block, torch.float32)
        folded.set_context(context)
        out = folded(queries.clone(), Workspace())
        folded_bf16 = ShortContextBlock(block, torch.bfloat16)
        folded_bf16.set_context(context)
        out_bf16 = folded_bf16(queries.clone())
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert out_bf16.dtype == torch.float32
    assert not torch.equal(out_bf16, out)
    assert F.cosine_similarity(out_bf16, expected, dim=-1).min() > 0.999


def test_short_context_block_with_a_readout_gives_the_readout_of_the_block(perturb_norms_and_biases) -> None:
    """The count head folded into the feed-forward layer's output projection gives ``readout(block(queries))``."""
    torch.manual_seed(0)
    block = CrossAttentionBlock(32, n_heads=2, dropout_rate=0.0, ffn_multiplier=1.0).eval()
    perturb_norms_and_biases(block)
    readout = nn.Linear(32, 2)
    queries, context = torch.randn(3, 40, 32), 2.0 * torch.randn(3, 4, 32)
    with torch.no_grad():
        expected = readout(block(queries, context))
        folded = ShortContextBlock(block, torch.float32, readout=readout)
        folded.set_context(context)
        out = folded(queries.clone(), Workspace())
        second = folded(queries[1:].clone(), Workspace(), cells=slice(1, 3))  # a subset of the context's cells
    assert out.shape == (3, 40, 2)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(second, expected[1:], rtol=1e-5, atol=1e-5)


def test_gated_silu_gradient_matches_autograd() -> None:
    torch.manual_seed(0)
    hidden = torch.randn(3, 7, 10, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(gated_silu, (hidden,))
    gate, value = hidden.chunk(2, dim=-1)
    expected = F.silu(gate) * value
    weight = torch.randn_like(expected)
    (expected_grad,) = torch.autograd.grad((expected * weight).sum(), hidden)
    out = gated_silu(hidden)
    (grad,) = torch.autograd.grad((out * weight).sum(), hidden)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grad, expected_grad)
