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
        self.register_buffer("group_cells", torch.zeros(0), persistent=False)
        self.group_key_stride = 1

    def forward(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Prior mean and log-variance ``(batch, 1, n_hidden)`` from codes ``(batch, n_codes)``."""
        logvar = self.to_logvar(codes).clamp(LOGVAR_MIN, LOGVAR_MAX)
        return self.to_mean(codes).unsqueeze(-2), logvar.unsqueeze(-2)

    def set_group_codes(
        self, keys: torch.Tensor, codes: torch.Tensor, stride: int, n_cells: torch.Tensor | None = None
    ) -> None:
        """Set the code table.

        ``keys`` ``(n_groups,)`` are ``dataset_code * stride + donor_code``; ``codes`` is ``(n_groups, M)``;
        ``n_cells`` ``(n_groups,)``, the groups' sizes, weight :meth:`dataset_means` (equally without it).
        """
        order = torch.argsort(keys)
        self.group_keys = keys[order].to(self.group_keys.device)
        self.group_codes = codes[order].to(self.group_codes.device, torch.float32)
        self.group_key_stride = int(stride)
        n_cells = torch.ones(keys.shape) if n_cells is None else torch.as_tensor(n_cells)
        self.group_cells = n_cells[order].to(self.group_cells.device, torch.float32)

    def dataset_means(self) -> torch.Tensor:
        """``(n_groups, n_hidden)``: for each group of the table, the prior mean averaged over its dataset's cells.

        The mean of the prior means of the dataset's groups, weighted by their sizes (``n_cells`` of
        :meth:`set_group_codes`).
        """
        means = self.to_mean(self.group_codes)
        dataset = torch.div(self.group_keys, self.group_key_stride, rounding_mode="floor")
        _, group_dataset = torch.unique(dataset, return_inverse=True)
        n_datasets = int(group_dataset.max()) + 1 if group_dataset.numel() else 0
        cells = torch.zeros(n_datasets, device=means.device).index_add_(0, group_dataset, self.group_cells)
        sums = torch.zeros(n_datasets, means.shape[1], device=means.device)
        sums.index_add_(0, group_dataset, means * self.group_cells[:, None])
        return (sums / cells[:, None])[group_dataset]

    def group_codes_for(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """Soft pseudo-bulk codes ``(batch, M)`` of the cells in ``tensors``."""
        return self.group_codes[self.group_rows_for(tensors)]

    def group_rows_for(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """Rows ``(batch,)`` of the code table (groups in the order of ``group_keys``) of the cells in ``tensors``."""
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
        return rows
