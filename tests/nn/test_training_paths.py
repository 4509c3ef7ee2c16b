"""The cheaper CPU training paths compute the same function and gradients as PyTorch's plain operators."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sctrilemma.nn import CrossAttention, CrossAttentionBlock
from sctrilemma.nn._layers import unit_rms


def _gradients(output: torch.Tensor, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    weight = torch.randn_like(output, generator=torch.Generator().manual_seed(1))
    return torch.autograd.grad((output * weight).sum(), inputs)


def test_unit_rms_autograd_path_matches_composite() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 6, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(unit_rms, (x,))
    composite = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + torch.finfo(x.dtype).eps)
    torch.testing.assert_close(unit_rms(x), composite)
    torch.testing.assert_close(_gradients(unit_rms(x), [x]), _gradients(composite, [x]))
    assert type(unit_rms(x).grad_fn).__name__ == "_UnitRMSBackward"  # the custom path ran


def _sdpa_attention(
    attention: CrossAttention, queries: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    batch, n_queries, width = queries.shape
    split = lambda t: t.view(batch, t.shape[1], attention.n_heads, -1).transpose(1, 2)
    keys, values = attention.to_kv(context).chunk(2, dim=-1)
    attn_mask = None if mask is None else mask[:, None, None, :]
    out = F.scaled_dot_product_attention(
        split(attention.to_q(queries)), split(keys), split(values), attn_mask=attn_mask
    )
    return attention.to_out(out.transpose(1, 2).reshape(batch, n_queries, width))


def _float64_attention() -> CrossAttention:
    """A float64 attention in training mode whose weights and biases are all far from their initial values (seeded)."""
    torch.manual_seed(0)
    attention = CrossAttention(16, n_heads=4).double().train()
    for parameter in attention.parameters():
        torch.nn.init.normal_(parameter, std=0.5)
    return attention


@pytest.mark.parametrize("with_query_scale", [False, True])
def test_folded_attention_matches_sdpa_with_gradients(with_query_scale: bool) -> None:
    attention = _float64_attention()
    queries = torch.randn(3, 40, 16, dtype=torch.float64, requires_grad=True)
    context = torch.randn(3, 4, 16, dtype=torch.float64, requires_grad=True)
    scale = torch.randn(16, dtype=torch.float64, requires_grad=True) if with_query_scale else None
    assert attention._folds_context(queries, context)
    out = attention(queries, context, query_scale=scale)
    expected = _sdpa_attention(attention, queries if scale is None else queries * scale, context)
    inputs = [queries, context, *attention.parameters(), *([scale] if with_query_scale else [])]
    torch.testing.assert_close(out, expected)
    for grad, expected_grad in zip(_gradients(out, inputs), _gradients(expected, inputs), strict=True):
        torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize(
    ("n_queries", "n_context", "takes_path"), [(40, 4, "_folds_context"), (3, 40, "_absorbs_context")]
)
def test_cheaper_attention_drops_attention_weights_in_training(n_queries: int, n_context: int, takes_path: str) -> None:
    torch.manual_seed(0)
    attention = CrossAttention(16, n_heads=4, dropout_rate=0.5)
    queries, context = torch.randn(2, n_queries, 16), torch.randn(2, n_context, 16)
    assert getattr(attention, takes_path)(queries, context)
    expected = attention.eval()(queries, context)
    assert not torch.allclose(attention.train()(queries, context), expected)
    attention.dropout_rate = 0.0  # dropout is the only difference between training and evaluation
    torch.testing.assert_close(attention.train()(queries, context), expected)


@pytest.mark.parametrize("with_scales", [False, True])
def test_absorbed_attention_matches_sdpa_with_gradients(with_scales: bool) -> None:
    attention = _float64_attention()
    queries = torch.randn(4, 3, 16, dtype=torch.float64, requires_grad=True)
    context = torch.randn(4, 40, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(4, 40, generator=torch.Generator().manual_seed(2)) > 0.3
    mask[2] = False  # a cell with nothing to attend to gets zero attention, as in SDPA
    scales = [torch.randn(16, dtype=torch.float64, requires_grad=True) for _ in range(2)] if with_scales else []
    query_scale, context_scale = scales if with_scales else (None, None)
    assert attention._absorbs_context(queries, context)
    out = attention(queries, context, mask, context_scale, query_scale)
    expected = _sdpa_attention(
        attention,
        queries if query_scale is None else queries * query_scale,
        context if context_scale is None else context * context_scale,
        mask,
    )
    torch.testing.assert_close(out, expected)
    inputs = [queries, context, *attention.parameters(), *scales]
    for grad, expected_grad in zip(_gradients(out, inputs), _gradients(expected, inputs), strict=True):
        torch.testing.assert_close(grad, expected_grad)


def _reference_block(block: CrossAttentionBlock, queries: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    """The block written with torch.nn.RMSNorm modules and SDPA, norm weights not folded."""
    queries = queries + _sdpa_attention(block.attention, block.norm_queries(queries), block.norm_context(context))
    gate, value = block.ffn.proj_in(block.norm_ffn(queries)).chunk(2, dim=-1)
    return queries + block.ffn.proj_out(F.silu(gate) * value)


@pytest.mark.parametrize(("n_queries", "n_context"), [(40, 4), (4, 40)])
def test_block_with_folded_norm_weights_matches_reference(n_queries: int, n_context: int) -> None:
    torch.manual_seed(0)
    block = CrossAttentionBlock(16, n_heads=4, dropout_rate=0.0, ffn_multiplier=1.0).double().train()
    for parameter in block.parameters():
        torch.nn.init.normal_(parameter, std=0.5)
    queries = torch.randn(3, n_queries, 16, dtype=torch.float64, requires_grad=True)
    context = torch.randn(3, n_context, 16, dtype=torch.float64, requires_grad=True)
    out, expected = block(queries, context), _reference_block(block, queries, context)
    inputs = [queries, context, *block.parameters()]
    torch.testing.assert_close(out, expected)
    for grad, expected_grad in zip(_gradients(out, inputs), _gradients(expected, inputs), strict=True):
        torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize(("dropout_rate", "readout_bias"), [(0.0, True), (0.0, False), (0.3, True)])
def test_block_readout_folded_into_the_feed_forward_layer(
    dropout_rate: float, readout_bias: bool, perturb_norms_and_biases
) -> None:
    """A read-out folded into the last projection gives the read-out of the block's output, values and gradients."""
    torch.manual_seed(0)
    block = perturb_norms_and_biases(CrossAttentionBlock(16, n_heads=4, dropout_rate=dropout_rate).double().train())
    readout = perturb_norms_and_biases(torch.nn.Linear(16, 2, bias=readout_bias).double())
    queries = torch.randn(3, 40, 16, dtype=torch.float64, requires_grad=True)
    context = torch.randn(3, 4, 16, dtype=torch.float64, requires_grad=True)
    inputs = [queries, context, *block.parameters(), *readout.parameters()]
    calls = []
    hook = block.ffn.proj_out.register_forward_hook(lambda *args: calls.append(1))
    torch.manual_seed(5)  # the same dropout masks for both
    out = block(queries, context, readout=readout)
    hook.remove()
    assert len(calls) == (dropout_rate > 0.0)  # folded unless dropout acts on the layer's output
    torch.manual_seed(5)
    expected = readout(block(queries, context))
    assert out.shape == (3, 40, 2)
    torch.testing.assert_close(out, expected)
    for grad, expected_grad in zip(_gradients(out, inputs), _gradients(expected, inputs), strict=True):
        torch.testing.assert_close(grad, expected_grad)
    if dropout_rate > 0.0:  # the masks matter: a different draw gives a different output
        assert not torch.allclose(block(queries, context, readout=readout), out)
