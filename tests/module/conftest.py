"""Fixtures shared by the module tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    import anndata as ad


@pytest.fixture
def counts(small_adata: ad.AnnData) -> torch.Tensor:
    """The small real example's counts as a dense float tensor (``test_minified`` uses its own synthetic ones)."""
    return torch.as_tensor(small_adata.X.toarray(), dtype=torch.float32)


@pytest.fixture
def module_sizes(tiny: dict) -> dict:
    """The tiny sizes without ``n_prior_codes``, for ``SCTrilemmaModule`` built with the prior's own default codes."""
    return {k: v for k, v in tiny.items() if k != "n_prior_codes"}
