"""Baselines scored next to SCTrilemma: PCA of log1p-CP10K HVGs and scVI, on the same cells."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

import numpy as np

from sctrilemma.train._threads import torch_threads_kept

if TYPE_CHECKING:
    from anndata import AnnData


@dataclass
class BaselineResult:
    """An embedding (and optionally a reconstruction) with the training it took.

    Attributes
    ----------
    embedding
        ``(n_obs, n_dims)``.
    reconstruction
        Expected counts ``(n_obs, n_genes)`` over the data's genes, or ``None``.
    train_seconds
        Wall-clock training time.
    details
        Budget and settings, for the scorecard's notes.
    """

    embedding: np.ndarray
    reconstruction: np.ndarray | None = None
    train_seconds: float = 0.0
    details: dict = field(default_factory=dict)


def _counts(adata: AnnData, layer: str | None):
    return adata.X if layer is None else adata.layers[layer]


def pca_baseline(
    adata: AnnData, layer: str | None = None, n_top_genes: int = 2000, n_comps: int = 50, seed: int = 0
) -> BaselineResult:
    """PCA of log1p-CP10K expression of the highly variable genes (Seurat flavour on log data).

    Works on a copy; ``adata`` is not modified. PyTorch's thread count is restored afterwards: scanpy's
    preprocessing raises it to the number of cores (measured with ``OMP_NUM_THREADS=1``), which left later
    training in the same process oversubscribed.
    """
    import scanpy as sc

    start = time.perf_counter()
    work = adata.copy()
    work.X = _counts(adata, layer).copy()
    with torch_threads_kept():
        sc.pp.normalize_total(work, target_sum=1e4)
        sc.pp.log1p(work)
        n_top = min(n_top_genes, work.n_vars)
        sc.pp.highly_variable_genes(work, n_top_genes=n_top, subset=True)
        n_comps = min(n_comps, work.n_vars - 1, work.n_obs - 1)
        sc.pp.pca(work, n_comps=n_comps, random_state=seed)
    return BaselineResult(
        embedding=np.asarray(work.obsm["X_pca"]),
        train_seconds=time.perf_counter() - start,
        details={"n_top_genes": n_top, "n_comps": n_comps},
    )


def scvi_baseline(
    adata: AnnData,
    layer: str | None = None,
    batch_key: str | None = None,
    max_epochs: int | None = None,
    time_budget_s: float | None = None,
    n_latent: int = 10,
    seed: int = 0,
    reconstruct: bool = True,
) -> BaselineResult:
    """ScVI (scvi-tools defaults, ZINB) with or without a batch covariate, at a stated budget.

    Parameters
    ----------
    adata
        Raw counts; a copy is set up, ``adata`` is not modified.
    layer
        Layer with counts.
    batch_key
        ``obs`` column used as scVI's batch (e.g. the donor), or ``None``.
    max_epochs
        Epochs; defaults to scVI's heuristic.
    time_budget_s
        Wall-clock training budget (Lightning ``max_time``); training stops at whichever comes first.
    n_latent
        Latent dimensions.
    seed
        ``scvi.settings.seed``.
    reconstruct
        Also return the expected counts (``get_normalized_expression`` with the observed library).
    """
    import scvi

    scvi.settings.seed = seed
    work = adata.copy()
    scvi.model.SCVI.setup_anndata(work, layer=layer, batch_key=batch_key)
    model = scvi.model.SCVI(work, n_latent=n_latent, gene_likelihood="zinb")
    trainer_kwargs = {} if time_budget_s is None else {"max_time": timedelta(seconds=time_budget_s)}
    start = time.perf_counter()
    model.train(max_epochs=max_epochs, enable_progress_bar=False, **trainer_kwargs)
    seconds = time.perf_counter() - start
    reconstruction = None
    if reconstruct:
        library = np.asarray(_counts(work, layer).sum(axis=1)).ravel()
        proportions = model.get_normalized_expression(library_size=1.0, return_numpy=True)
        reconstruction = np.asarray(proportions) * library[:, None]
    return BaselineResult(
        embedding=model.get_latent_representation(),
        reconstruction=reconstruction,
        train_seconds=seconds,
        details={
            "batch_key": batch_key,
            "epochs": int(model.history["elbo_train"].shape[0]),
            "time_budget_s": time_budget_s,
            "n_latent": n_latent,
        },
    )
