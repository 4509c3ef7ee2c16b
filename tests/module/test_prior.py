from __future__ import annotations

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from sctrilemma.module import PseudobulkPrior, gaussian_kl
from sctrilemma.module._prior import LOGVAR_MAX, LOGVAR_MIN


def _normal(mean: torch.Tensor, logvar: torch.Tensor) -> Normal:
    return Normal(mean, torch.exp(0.5 * logvar))


def test_gaussian_kl_matches_torch() -> None:
    g = torch.Generator().manual_seed(0)
    q_mean, p_mean = torch.randn(6, 4, 9, generator=g), 2.0 * torch.randn(6, 4, 9, generator=g)
    q_logvar, p_logvar = 2.0 * torch.randn(6, 4, 9, generator=g), 2.0 * torch.randn(6, 4, 9, generator=g)
    expected = kl_divergence(_normal(q_mean, q_logvar), _normal(p_mean, p_logvar))
    torch.testing.assert_close(gaussian_kl(q_mean, q_logvar, p_mean, p_logvar), expected, rtol=1e-5, atol=1e-5)


def test_gaussian_kl_broadcasts_a_per_cell_prior() -> None:
    g = torch.Generator().manual_seed(1)
    q_mean, q_logvar = torch.randn(5, 3, 7, generator=g), torch.randn(5, 3, 7, generator=g)
    p_mean, p_logvar = torch.randn(5, 1, 7, generator=g), torch.randn(5, 1, 7, generator=g)
    kl = gaussian_kl(q_mean, q_logvar, p_mean, p_logvar)
    expected = kl_divergence(_normal(q_mean, q_logvar), _normal(p_mean.expand(-1, 3, -1), p_logvar.expand(-1, 3, -1)))
    assert kl.shape == (5, 3, 7)
    torch.testing.assert_close(kl, expected, rtol=1e-5, atol=1e-5)


def test_gaussian_kl_standard_normal_and_zero() -> None:
    g = torch.Generator().manual_seed(2)
    q_mean, q_logvar = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    zero = torch.zeros(())
    expected = kl_divergence(_normal(q_mean, q_logvar), Normal(torch.zeros(4, 6), torch.ones(4, 6)))
    torch.testing.assert_close(gaussian_kl(q_mean, q_logvar, zero, zero), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gaussian_kl(q_mean, q_logvar, q_mean, q_logvar), torch.zeros(4, 6), rtol=0.0, atol=1e-6)


def test_prior_initialisation() -> None:
    torch.manual_seed(0)
    prior = PseudobulkPrior(32, 512)
    weight = prior.to_mean.weight
    assert weight.shape == (512, 32)
    assert abs(weight.std().item() - 0.01) < 5e-4
    assert abs(weight.mean().item()) < 5e-4
    assert torch.equal(prior.to_mean.bias, torch.zeros(512))
    assert torch.equal(prior.to_logvar.weight, torch.zeros(512, 32))
    assert torch.equal(prior.to_logvar.bias, torch.zeros(512))


def test_prior_starts_near_standard_normal() -> None:
    torch.manual_seed(1)
    prior = PseudobulkPrior(8, 16)
    codes = torch.softmax(torch.randn(5, 8), dim=-1)
    mean, logvar = prior(codes)
    assert mean.shape == logvar.shape == (5, 1, 16)
    assert torch.equal(logvar, torch.zeros(5, 1, 16))
    assert mean.abs().max() < 0.1
    torch.testing.assert_close(mean[:, 0], codes @ prior.to_mean.weight.T)


@pytest.mark.parametrize(("bias", "expected"), [(10.0, LOGVAR_MAX), (-10.0, LOGVAR_MIN)])
def test_prior_logvar_is_clamped(bias: float, expected: float) -> None:
    prior = PseudobulkPrior(4, 6)
    with torch.no_grad():
        prior.to_logvar.bias.fill_(bias)
    _, logvar = prior(torch.full((3, 4), 0.25))
    assert torch.equal(logvar, torch.full((3, 1, 6), expected))
