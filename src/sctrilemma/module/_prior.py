"""KL priors over the latent tokens: standard normal, or PB-Cond's pseudo-bulk-conditioned Gaussian."""

from __future__ import annotations

import torch
from torch import nn

from sctrilemma._constants import SCT_REGISTRY_KEYS

LOGVAR_MIN, LOGVAR_MAX = -4.0, 2.0


def gaussian_kl(
    q_mean: torch.Tensor, q_logvar: torch.Tensor, p_mean: torch.Tensor, p_logvar: torch.Tensor
) -> torch.Tensor:
    """Elementwise ``KL(N(q_mean, e^q_logvar) || N(p_mean, e^p_logvar))``; arguments broadcast."""
    return 0.5 * (p_logvar - q_logvar + (q_logvar.exp() + (q_mean - p_mean).square()) * torch.exp(-p_logvar) - 1.0)


class PseudobulkPrior(nn.Module):
    """PB-Cond prior: two linear maps from a cell's soft pseudo-bulk code ``t_b`` to a diagonal Gaussian.

    The same mean and log-variance ``(n_hidden,)`` are shared by all ``K`` tokens of a cell.
    The mean map starts at ``N(0, 0.01^2)`` weights, the log-variance map at zero, so training starts
    from (almost) the standard normal. Each cell's code is that of its dataset-donor group, looked up in a table
    that the model sets with :meth:`set_group_codes` (not saved with the weights; the model recomputes it).
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
        self.register_buffer("group_keys", torch.zeros(0, dtype=torch.long), persistent=False)
        self.register_buffer("group_codes", torch.zeros(0, n_codes), persistent=False)
        self.group_key_stride = 1

    def forward(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Prior mean and log-variance ``(batch, 1, n_hidden)`` from codes ``(batch, n_codes)``."""
        logvar = self.to_logvar(codes).clamp(LOGVAR_MIN, LOGVAR_MAX)
        return self.to_mean(codes).unsqueeze(-2), logvar.unsqueeze(-2)

    def set_group_codes(self, keys: torch.Tensor, codes: torch.Tensor, stride: int) -> None:
        """Set the code table.

        ``keys`` ``(n_groups,)`` are ``dataset_code * stride + donor_code``; ``codes`` is ``(n_groups, M)``.
        """
        order = torch.argsort(keys)
        self.group_keys = keys[order].to(self.group_keys.device)
        self.group_codes = codes[order].to(self.group_codes.device, torch.float32)
        self.group_key_stride = int(stride)

    def group_codes_for(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """Soft pseudo-bulk codes ``(batch, M)`` of the cells in ``tensors``."""
        if self.group_keys.numel() == 0:
            raise RuntimeError(
                "The PB-Cond prior has no pseudo-bulk codes for this data. Use the model API "
                "(SCTrilemma.train / get_elbo), which computes them, or construct the model with prior='normal'."
            )
        dataset = tensors[SCT_REGISTRY_KEYS.DATASET_KEY].long().view(-1)
        donor = tensors[SCT_REGISTRY_KEYS.DONOR_KEY].long().view(-1)
        keys = (dataset * self.group_key_stride + donor).to(self.group_keys.device)
        rows = torch.searchsorted(self.group_keys, keys).clamp_max(self.group_keys.numel() - 1)
        if not torch.equal(self.group_keys[rows], keys):
            raise RuntimeError("Some cells belong to a dataset-donor group without a pseudo-bulk code.")
        return self.group_codes[rows]
