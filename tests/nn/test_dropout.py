from __future__ import annotations

import pytest
import torch

from sctrilemma.nn import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_drops_at_rate_p_and_rescales(p: float, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.ones(1_000_001, dtype=dtype)  # odd size: the last 64-bit draw is half used
    out = dropout(x, p)
    assert out.dtype == dtype
    assert out.shape == x.shape
    kept = out != 0
    # Binomial standard error is below 5e-4 at this size; 4 standard errors.
    assert abs(1.0 - kept.float().mean().item() - p) < 2e-3
    torch.testing.assert_close(out[kept].float(), torch.full((int(kept.sum()),), 1.0 / (1.0 - p)), rtol=1e-2, atol=0)


def test_dropout_is_reproducible_and_independent_across_calls() -> None:
    x = torch.ones(4096)
    torch.manual_seed(3)
    first, second = dropout(x, 0.3), dropout(x, 0.3)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.3), first)
    assert not torch.equal(first, second)
    # Masks of neighbouring elements are not correlated (both halves of each 64-bit draw are used).
    kept = (first != 0).float()
    correlation = torch.corrcoef(torch.stack([kept[0::2], kept[1::2]]))[0, 1]
    assert abs(correlation) < 0.1


def test_dropout_gradient_and_eval_mode() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 32, requires_grad=True)
    out = dropout(x, 0.25)
    out.sum().backward()
    expected = (out != 0).float() / 0.75
    torch.testing.assert_close(x.grad, expected)
    layer = Dropout(0.25).eval()
    assert layer(x) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
