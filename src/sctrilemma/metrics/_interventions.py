r"""Demand-targeted interventions on a trained latent, each pushing one demand at strength ``alpha``.

Following :cite:p:`sctrilemma` (Section "Demand-targeted interventions" and Appendix "Demand-targeted
interventions"), ``alpha`` interpolates between the unmodified latent (``alpha = 0``) and the full
intervention (``alpha = 1``):

- identity, :func:`centroid_shrinkage`: :math:`r' = (1-\alpha) r + \alpha c_{k(i)}` toward the centroid of the
  cell's k-means cluster (:func:`kmeans_labels`, as many clusters as annotated cell types) or of its annotated label;
- context invariance, :func:`donor_centering`: :math:`r' = r - \alpha(\mu_{b(i)} - \mu)`, the donor mean offset
  from the dataset mean;
- expression fidelity, :func:`latent_refinement`: :math:`r' = r + \alpha(r^\star - r)`, where :math:`r^\star` is
  :math:`r` after ``n_steps`` Adam steps maximising the per-cell Pearson correlation between the decoded and the
  observed ``log1p(CP10K)`` profile.

All functions accept a latent of shape ``(n_cells, ...)`` (a pooled embedding ``(n_cells, n_latent)`` or latent
tokens ``(n_cells, n_tokens, n_latent)``); group means are taken over cells, element-wise over the rest.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

from sctrilemma._normalize import log1p_cp10k_tensor

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from numpy.typing import ArrayLike

logger = logging.getLogger(__name__)


def _check_alpha(alpha: float) -> float:
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"`alpha={alpha}` must lie in [0, 1]: 0 leaves the latent unchanged, 1 is the full push.")
    return alpha


def _check_latent(latent: ArrayLike, name: str) -> np.ndarray:
    array = np.asarray(latent)
    if array.ndim < 2 or array.shape[0] == 0:
        raise ValueError(f"`{name}` must have shape (n_cells, ...) with at least one cell; got {array.shape}.")
    if array.dtype.kind not in "fiu":
        raise ValueError(f"`{name}` has dtype {array.dtype}; pass a numeric array.")
    if not np.isfinite(array).all():
        raise ValueError(f"`{name}` contains NaN or infinite values; remove those cells first.")
    return array


def _factorize(labels: ArrayLike, n_cells: int, name: str) -> tuple[np.ndarray, int]:
    """Integer codes ``(n_cells,)`` of ``labels`` and the number of classes, validated."""
    values = np.asarray(labels, dtype=object).ravel()
    if values.shape[0] != n_cells:
        raise ValueError(f"`{name}` has {values.shape[0]} labels for {n_cells} cells; pass one label per cell.")
    codes, classes = pd.factorize(pd.Series(values), sort=True)
    if (codes < 0).any():
        raise ValueError(f"`{name}` has {int((codes < 0).sum())} missing labels; fill or drop those cells.")
    if len(classes) < 2:
        raise ValueError(
            f"`{name}` has a single class ({classes[0]!r}); the intervention needs at least two groups "
            "(with one, it only moves every cell toward the overall mean)."
        )
    return codes, len(classes)


def _group_means(flat: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Per-group means ``(n_groups, n_features)`` of ``flat`` ``(n_cells, n_features)`` with one sparse product."""
    n_cells = flat.shape[0]
    counts = np.bincount(codes, minlength=n_groups).astype(np.float64)
    indicator = sp.csr_matrix((1.0 / counts[codes], (codes, np.arange(n_cells))), shape=(n_groups, n_cells))
    return np.asarray(indicator @ flat)


def kmeans_labels(embedding: ArrayLike, n_clusters: int, *, random_state: int = 0, n_init: int = 10) -> np.ndarray:
    """k-means cluster of each cell, the targets of the paper's identity push.

    Parameters
    ----------
    embedding
        Cell embedding ``(n_cells, n_latent)``, e.g. the pooled representation.
    n_clusters
        Number of clusters; the paper uses the number of annotated cell types.
    random_state
        Seed of ``sklearn.cluster.KMeans``.
    n_init
        Number of k-means initialisations.

    Returns
    -------
    Cluster labels ``(n_cells,)``.
    """
    from sklearn.cluster import KMeans

    array = _check_latent(embedding, "embedding")
    flat = array.reshape(array.shape[0], -1).astype(np.float64)
    if not 2 <= n_clusters <= flat.shape[0]:
        raise ValueError(f"`n_clusters={n_clusters}` must lie between 2 and the number of cells ({flat.shape[0]}).")
    return KMeans(n_clusters=n_clusters, n_init=n_init, random_state=random_state).fit_predict(flat)


def centroid_shrinkage(latent: ArrayLike, labels: ArrayLike, *, alpha: float) -> np.ndarray:
    r"""Shrink each cell toward its group centroid: :math:`r' = (1-\alpha)\,r + \alpha\,c_{k(i)}` (pushes identity).

    Parameters
    ----------
    latent
        Latent ``(n_cells, ...)``.
    labels
        Group of each cell ``(n_cells,)``: k-means clusters (:func:`kmeans_labels`) for the paper's identity push,
        or annotated cell types for its label-centroid variant.
    alpha
        Strength in ``[0, 1]``; ``1`` collapses every cell onto its centroid.

    Returns
    -------
    Intervened latent, same shape and dtype as ``latent``.
    """
    alpha = _check_alpha(alpha)
    array = _check_latent(latent, "latent")
    codes, n_groups = _factorize(labels, array.shape[0], "labels")
    flat = array.reshape(array.shape[0], -1).astype(np.float64)
    centroids = _group_means(flat, codes, n_groups)[codes]
    out = (1.0 - alpha) * flat + alpha * centroids
    return out.reshape(array.shape).astype(array.dtype if array.dtype.kind == "f" else np.float64)


def donor_centering(latent: ArrayLike, donors: ArrayLike, *, alpha: float) -> np.ndarray:
    r"""Remove a fraction of each donor's mean offset: :math:`r' = r - \alpha(\mu_{b(i)} - \mu)` (pushes invariance).

    :math:`\mu_b` is the mean latent of donor :math:`b` and :math:`\mu` the mean over all cells; at ``alpha = 1``
    every donor mean equals :math:`\mu`, and the overall mean is unchanged for any ``alpha``.

    Parameters
    ----------
    latent
        Latent ``(n_cells, ...)``.
    donors
        Donor (context) of each cell ``(n_cells,)``.
    alpha
        Strength in ``[0, 1]``.

    Returns
    -------
    Intervened latent, same shape and dtype as ``latent``.
    """
    alpha = _check_alpha(alpha)
    array = _check_latent(latent, "latent")
    codes, n_groups = _factorize(donors, array.shape[0], "donors")
    flat = array.reshape(array.shape[0], -1).astype(np.float64)
    offsets = _group_means(flat, codes, n_groups) - flat.mean(axis=0, keepdims=True)
    out = flat - alpha * offsets[codes]
    return out.reshape(array.shape).astype(array.dtype if array.dtype.kind == "f" else np.float64)


def _mean_cell_pearson(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    prediction = prediction - prediction.mean(dim=1, keepdim=True)
    target = target - target.mean(dim=1, keepdim=True)
    denominator = (prediction.norm(dim=1) * target.norm(dim=1)).clamp_min(1e-8)
    return ((prediction * target).sum(dim=1) / denominator).mean()


def latent_refinement(
    latent: ArrayLike,
    counts,
    decoder: Callable[[torch.Tensor], torch.Tensor],
    *,
    alpha: float,
    n_steps: int = 30,
    lr_scale: float = 0.02,
    batch_size: int = 256,
) -> np.ndarray:
    r"""Move each latent toward a refined one that reconstructs the cell better (pushes expression fidelity).

    :math:`r^\star` starts at :math:`r` and takes ``n_steps`` Adam steps (learning rate ``lr_scale`` times the
    standard deviation of ``latent``) on :math:`-\mathrm{mean}_i\,\mathrm{Pearson}(\log\mathrm{1p}(\mathrm{CP10K}(
    \mathrm{decoder}(r_i))), \log\mathrm{1p}(\mathrm{CP10K}(x_i)))` over the genes of ``counts``; the result is
    :math:`r + \alpha(r^\star - r)`. Each cell's objective depends only on its own latent, so the optimisation is
    per cell and (as Adam rescales every coordinate) independent of ``batch_size`` up to Adam's epsilon. Only the
    latent is optimised; gradients never accumulate on the decoder's parameters.

    Parameters
    ----------
    latent
        Posterior-mean latent ``(n_cells, ...)`` as the decoder consumes it.
    counts
        Observed counts of the decoded genes ``(n_cells, n_genes)``, dense or sparse.
    decoder
        Differentiable map from a latent batch ``(batch, ...)`` (a float32 :class:`torch.Tensor`) to non-negative
        expected counts ``(batch, n_genes)`` for the genes of ``counts``. Put a torch module in eval mode first.
    alpha
        Strength in ``[0, 1]``; ``0`` returns the latent unchanged without calling ``decoder``.
    n_steps
        Optimisation steps (30 in the paper).
    lr_scale
        Adam learning rate relative to the latent's standard deviation (used as the absolute rate if that is 0).
    batch_size
        Cells optimised together.

    Returns
    -------
    Intervened latent, same shape as ``latent``, float32 unless ``latent`` is float64.
    """
    import torch

    alpha = _check_alpha(alpha)
    array = _check_latent(latent, "latent")
    out_dtype = np.float64 if array.dtype == np.float64 else np.float32
    counts = sp.csr_matrix(counts) if sp.issparse(counts) else np.asarray(counts)
    if counts.ndim != 2 or counts.shape[0] != array.shape[0]:
        raise ValueError(
            f"`counts` has shape {counts.shape} but `latent` has {array.shape[0]} cells; pass the observed counts "
            "(n_cells, n_genes) of the decoded genes, in the same cell order."
        )
    if n_steps < 1 or lr_scale <= 0 or batch_size < 1:
        raise ValueError(
            f"`n_steps={n_steps}`, `batch_size={batch_size}` must be at least 1 and `lr_scale={lr_scale}` positive."
        )
    if alpha == 0.0:
        return array.astype(out_dtype, copy=True)
    values = counts.data if sp.issparse(counts) else np.asarray(counts)
    if not np.isfinite(values).all() or (values.size and values.min() < 0):
        raise ValueError("`counts` must be finite and non-negative; pass the raw counts of the decoded genes.")

    std = float(array.std())
    lr = lr_scale * std if std > 0 else lr_scale
    refined = np.empty(array.shape, dtype=np.float32)
    for start in range(0, array.shape[0], batch_size):
        stop = min(start + batch_size, array.shape[0])
        block = counts[start:stop]
        block = block.toarray() if sp.issparse(block) else np.asarray(block)
        target = log1p_cp10k_tensor(torch.as_tensor(block, dtype=torch.float32))
        z = torch.tensor(array[start:stop], dtype=torch.float32, requires_grad=True)
        optimizer = torch.optim.Adam([z], lr=lr)
        for _ in range(n_steps):
            with torch.enable_grad():
                mean = decoder(z)
                if tuple(mean.shape) != tuple(target.shape):
                    raise ValueError(
                        f"`decoder` returned shape {tuple(mean.shape)} for {stop - start} cells; expected "
                        f"{tuple(target.shape)}, one expected count per gene of `counts`."
                    )
                loss = -_mean_cell_pearson(log1p_cp10k_tensor(mean.float()), target)
                (gradient,) = torch.autograd.grad(loss, z)
            optimizer.zero_grad(set_to_none=True)
            z.grad = gradient
            optimizer.step()
        refined[start:stop] = z.detach().numpy()
    out = array.astype(np.float64) + alpha * (refined.astype(np.float64) - array.astype(np.float64))
    return out.astype(out_dtype)
