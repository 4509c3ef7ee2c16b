"""KL priors over the latent tokens: standard normal, or PB-Cond's pseudo-bulk-conditioned Gaussian."""

from __future__ import annotations

import torch
from torch import nn

LOGVAR_MIN, LOGVAR_MAX = -4.0, 2.0


def gaussian_kl(
    q_mean: torch.Tensor, q_logvar: torch.Tensor, p_mean: torch.Tensor, p_logvar: torch.Tensor
) -> torch.Tensor:
    """Elementwise ``KL(N(q_mean, e^q_logvar) || N(p_mean, e^p_logvar))``; arguments broadcast."""
    return 0.5 * (p_logvar - q_logvar + (q_logvar.exp() + (q_mean - p_mean).square()) * torch.exp(-p_logvar) - 1.0)


class PseudobulkPrior(nn.Module):
    """PB-Cond prior: two linear maps from a soft pseudo-bulk code ``t_b`` to a diagonal Gaussian.

    The same mean and log-variance ``(n_hidden,)`` are shared by all ``K`` tokens of a cell.
    The mean map starts at ``N(0, 0.01^2)`` weights, the log-variance map at zero, so training starts
    from (almost) the standard normal.
    """

    def __init__(self, n_codes: int, n_hidden: int) -> None:
        super().__init__()
        self.to_mean = nn.Linear(n_codes, n_hidden)
        self.to_logvar = nn.Linear(n_codes, n_hidden)
        with torch.no_grad():
            nn.init.normal_(self.to_mean.weight, std=0.01)
            nn.init.zeros_(self.to_mean.bias)
            nn.init.zeros_(self.to_logvar.weight)
            nn.init.zeros_(self.to_logvar.bias)

    def forward(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Prior mean and log-variance ``(batch, 1, n_hidden)`` from codes ``(batch, n_codes)``."""
        logvar = self.to_logvar(codes).clamp(LOGVAR_MIN, LOGVAR_MAX)
        return self.to_mean(codes).unsqueeze(-2), logvar.unsqueeze(-2)
