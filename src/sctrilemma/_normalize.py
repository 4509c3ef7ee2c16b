"""Per-cell ``log1p(CP10K)`` normalisation and its PCA, shared by the model, the metrics and the baselines."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
import torch

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from sklearn.decomposition import PCA

# Counts per cell after normalisation: counts per 10,000 (CP10K), as in scanpy's ``normalize_total(target_sum=1e4)``.
TARGET_SUM = 1e4


def log1p_cp10k(matrix, *, library_size: ArrayLike | None = None) -> np.ndarray | sp.csr_matrix:
    """``log1p(1e4 * x / library)`` per cell; sparsity is kept (``log1p(0) = 0``).

    Parameters
    ----------
    matrix
        Non-negative counts or expected counts, ``(n_cells, n_genes)``, dense or sparse.
    library_size
        Per-cell totals ``(n_cells,)``; defaults to the row sums over the given genes. Totals below one
        are treated as one, so an all-zero cell stays zero.

    Returns
    -------
    Normalised matrix, ``(n_cells, n_genes)``, float64; CSR when the input is sparse.
    """
    if library_size is None:
        library = np.asarray(matrix.sum(axis=1), dtype=np.float64).ravel()
    else:
        library = np.asarray(library_size, dtype=np.float64).ravel()
        if library.shape[0] != matrix.shape[0]:
            raise ValueError(f"`library_size` has {library.shape[0]} entries for {matrix.shape[0]} cells.")
    scale = TARGET_SUM / np.maximum(library, 1.0)
    if sp.issparse(matrix):
        out = sp.csr_matrix(sp.diags(scale) @ sp.csr_matrix(matrix, dtype=np.float64))
        out.data = np.log1p(out.data)
        return out
    return np.log1p(np.asarray(matrix, dtype=np.float64) * scale[:, None])


def log1p_cp10k_tensor(counts: torch.Tensor, library: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`log1p_cp10k` of a tensor ``(batch, n_genes)``, with per-cell ``library`` ``(batch, 1)`` or the row sums."""
    if library is None:
        library = counts.sum(dim=-1, keepdim=True)
    return torch.log1p(counts * (TARGET_SUM / library.clamp_min(1.0)))


def fit_log1p_cp10k_pca(
    counts, n_components: int, *, seed: int = 0, library_size: ArrayLike | None = None
) -> tuple[PCA, np.ndarray]:
    """A PCA of :func:`log1p_cp10k` of ``counts`` and the cells' coordinates ``(n_cells, n_components)``.

    ARPACK centres sparse input implicitly, so a large sparse count matrix is never densified and the genes' mean
    levels are not the first component; ``seed`` seeds its start vector. ``n_components`` must be below
    ``min(n_cells, n_genes)``.
    """
    from sklearn.decomposition import PCA

    pca = PCA(n_components=n_components, svd_solver="arpack", random_state=seed)
    coordinates = pca.fit_transform(log1p_cp10k(counts, library_size=library_size))
    return pca, coordinates
