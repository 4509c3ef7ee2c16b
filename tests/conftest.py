"""Shared fixtures: small real data, a tiny model configuration, seeding, marker handling."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
import scvi
import torch
from tiny_sizes import TINY

from sctrilemma.data import load_example

if TYPE_CHECKING:
    import anndata as ad

_SKIP_UNLESS = {
    "gpu": (torch.cuda.is_available, "needs a CUDA device"),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests whose requirement (one table entry per marker) is not met on this machine."""
    for item in items:
        for marker, (available, reason) in _SKIP_UNLESS.items():
            if marker in item.keywords and not available():
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _seed() -> None:
    scvi.settings.seed = 0


@pytest.fixture(autouse=True)
def _one_thread_for_tiny_models(request: pytest.FixtureRequest):
    """Tiny models run fastest on one thread; OpenMP spinning on a loaded 2-core machine made them 20x slower.

    Tests marked ``slow`` (full-size runs, subprocesses and the longer trainings) keep all threads, as users run.
    """
    if request.node.get_closest_marker("slow"):
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def _example() -> ad.AnnData:
    return load_example()


@pytest.fixture
def example_adata(_example: ad.AnnData) -> ad.AnnData:
    """The full shipped example (3,000 cells x 2,511 genes), a fresh copy per test."""
    return _example.copy()


@pytest.fixture
def small_adata(_example: ad.AnnData) -> ad.AnnData:
    """400 cells of the example, 80 per donor, a fresh copy per test."""
    rng = np.random.default_rng(0)
    donors = _example.obs["donor"].to_numpy()
    keep = np.sort(
        np.concatenate([rng.choice(np.flatnonzero(donors == d), 80, replace=False) for d in np.unique(donors)])
    )
    return _example[keep].copy()


@pytest.fixture(scope="session")
def tiny_sizes() -> dict:
    """Tiny model sizes for module- and session-scoped fixtures (do not modify)."""
    return dict(TINY)


@pytest.fixture
def tiny(tiny_sizes: dict) -> dict:
    """Tiny model sizes, for ``SCTrilemma(adata, **tiny)`` or ``SCTrilemmaModule(n, **tiny)``."""
    return dict(tiny_sizes)


@pytest.fixture
def accelerator() -> str:
    return "cpu"


@pytest.fixture
def perturb_norms_and_biases():
    """A function adding noise to every norm weight and bias of a module, so that no folded term is trivial."""

    def perturb(module: torch.nn.Module) -> torch.nn.Module:
        with torch.no_grad():
            for name, tensor in module.named_parameters():
                if "norm" in name or name.endswith("bias"):
                    tensor.add_(0.3 * torch.randn_like(tensor))
        return module

    return perturb
