"""Context-invariance metrics.

BRAS, iLISI and PCR comparison (RQ1), the modality metrics of the RQ3 supplement, and sequencing-depth R^2.

BRAS, iLISI, PCR comparison and modality ASW delegate to ``scib_metrics``, whose definitions match the paper's
(Appendix C.2 and C.5 of :cite:p:`sctrilemma`); modality R^2 and conditional iLISI have no scib-metrics counterpart.
Depth R^2 is not a paper metric; it is a cross-validated linear regression with scikit-learn.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from scvi.utils import dependencies
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import KFold, cross_val_predict
from sklearn.neighbors import NearestNeighbors

from sctrilemma._normalize import fit_log1p_cp10k_pca
from sctrilemma._validation import check_counts

from ._errors import check_embedding, check_labels, l2_normalize, require_classes, skip
from ._identity import exact_neighbors

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def _bras_eligible(labels: np.ndarray, donors: np.ndarray, *, metric: str) -> None:
    """Raise unless some label has >= 2 donors and is not all singletons (scib-metrics skips those labels)."""
    for label in np.unique(labels):
        n_donors = np.unique(donors[labels == label]).size
        if 2 <= n_donors < int((labels == label).sum()):
            return
    raise skip(
        metric,
        "no cell type (stratum) holds cells from at least two donors with at least one donor contributing two cells.",
    )


@dependencies("scib_metrics")
def bras(X: ArrayLike, labels: ArrayLike, donors: ArrayLike, *, metric: str = "BRAS") -> float:
    r"""Batch-removal-adapted silhouette (BRAS) with donor as the batch (scib-metrics ``bras``).

    Within each cell type, ``a_i`` is the mean cosine distance to the other cells of ``i``'s donor and ``b_i`` the mean
    cosine distance to *all* cells of other donors; ``s_i = (b_i - a_i) / max(a_i, b_i)``, and BRAS is the mean over
    cell types of the per-type mean of ``1 - |s_i|``, over types present in at least two donors.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    labels
        Cell-type (or stratum) labels of shape ``(n_obs,)``; one label is allowed.
    donors
        Donor of each cell, shape ``(n_obs,)``.
    metric
        Name used in error messages (the conditional variant passes its own).

    Returns
    -------
    Score in ``[0, 1]``; 1 means donors are indistinguishable within every cell type.

    Notes
    -----
    scib-metrics skips a type whose every cell comes from a distinct donor (``a_i`` undefined); the paper's
    :math:`\mathcal{C}^*` would keep it. A donor with one cell in a type gets ``s_i = 0`` (silhouette convention).
    """
    import scib_metrics

    X = check_embedding(X)
    labels = check_labels(labels, X.shape[0], name="labels")
    donors = check_labels(donors, X.shape[0], name="donors")
    require_classes(donors, metric=metric, name="donors", what="donors")
    _bras_eligible(labels, donors, metric=metric)
    return float(scib_metrics.bras(X, labels, donors, metric="cosine", between_cluster_distances="mean_other"))


@dependencies("scib_metrics")
def ilisi(X: ArrayLike, donors: ArrayLike, *, n_neighbors: int = 90, perplexity: float | None = None) -> float:
    """Integration LISI over donors, ``(median_i L_i - 1) / (B - 1)`` (scib-metrics ``ilisi_knn``).

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    donors
        Donor of each cell, shape ``(n_obs,)``.
    n_neighbors
        Size of the exact kNN graph (:func:`~sctrilemma.metrics.exact_neighbors`), counting each cell.
    perplexity
        Effective neighbourhood size; ``None`` means ``n_neighbors // 3`` (30 for the default graph).

    Returns
    -------
    Score, 1 when every neighbourhood holds all donors evenly and 0 when it holds one donor.
    """
    import scib_metrics

    X = check_embedding(X)
    donors = check_labels(donors, X.shape[0], name="donors")
    require_classes(donors, metric="iLISI", name="donors", what="donors")
    neighbors = exact_neighbors(X, n_neighbors)
    return float(scib_metrics.ilisi_knn(neighbors, donors, perplexity=perplexity, scale=True))


def log1p_cp10k_pca(X_counts: ArrayLike | sp.spmatrix, *, n_comps: int = 50, seed: int = 0) -> np.ndarray:
    """PCA of ``log1p`` counts-per-10k, the pre-integration representation of PCR comparison.

    Parameters
    ----------
    X_counts
        Raw counts of shape ``(n_obs, n_genes)``, dense or sparse.
    n_comps
        Principal components kept (scanpy's default, 50), capped at ``min(n_obs, n_genes) - 1``.
    seed
        Seed of the ARPACK start vector.

    Returns
    -------
    PCA coordinates of shape ``(n_obs, n_comps)``.
    """
    if not sp.issparse(X_counts):
        X_counts = np.asarray(X_counts)
        if X_counts.ndim != 2:
            raise ValueError(f"`X_pre` must be 2-D (n_obs, n_genes); got an array of shape {X_counts.shape}.")
    check_counts(X_counts, where="`X_pre`")
    totals = np.asarray(X_counts.sum(axis=1)).ravel()
    if (totals == 0).any():
        raise ValueError(f"`X_pre` has {int((totals == 0).sum())} cells with zero total counts; remove them first.")
    n_comps = min(n_comps, min(X_counts.shape) - 1)
    if n_comps < 1:
        raise ValueError(f"`X_pre` has shape {X_counts.shape}; PCA needs at least 2 cells and 2 genes.")
    return fit_log1p_cp10k_pca(X_counts, n_comps, seed=seed, library_size=totals)[1]


@dependencies("scib_metrics")
def pcr_comparison(
    X_pre: ArrayLike | sp.spmatrix,
    X_post: ArrayLike,
    donors: ArrayLike,
    *,
    n_comps: int = 50,
    seed: int = 0,
) -> float:
    """PCR comparison, ``max(0, (PCR_pre - PCR_post) / PCR_pre)``, with donor as a categorical covariate.

    ``PCR`` is the variance-weighted R^2 of regressing each principal component on one-hot donors (scib-metrics
    ``pcr_comparison``). The pre-integration representation is :func:`~sctrilemma.metrics.log1p_cp10k_pca` of the raw counts.

    Parameters
    ----------
    X_pre
        Raw counts of shape ``(n_obs, n_genes)``, dense or sparse.
    X_post
        Evaluated embedding of shape ``(n_obs, n_latent)``.
    donors
        Donor of each cell, shape ``(n_obs,)``.
    n_comps
        Principal components of the pre-integration PCA.
    seed
        Seed of the ARPACK start vector.

    Returns
    -------
    Score in ``[0, 1]``; 1 means the embedding carries none of the donor variance of the expression PCA.
    """
    import scib_metrics

    X_post = check_embedding(X_post, name="X_post")
    donors = check_labels(donors, X_post.shape[0], name="donors")
    X_pre = X_pre if sp.issparse(X_pre) else np.asarray(X_pre)
    if X_pre.ndim != 2 or X_pre.shape[0] != X_post.shape[0]:
        raise ValueError(
            f"`X_pre` has shape {X_pre.shape} but `X_post` has {X_post.shape[0]} rows; pass counts of the same cells "
            "as a 2-D (n_obs, n_genes) matrix."
        )
    require_classes(donors, metric="PCR comparison", name="donors", what="donors")
    pre = log1p_cp10k_pca(X_pre, n_comps=n_comps, seed=seed)
    with warnings.catch_warnings():
        # The paper clips negative comparisons to 0 as scib-metrics does; its per-call warning is noise here.
        warnings.filterwarnings("ignore", message="PCR comparison score is negative")
        return float(scib_metrics.pcr_comparison(pre, X_post, donors, scale=True, categorical=True))


def depth_r2(X: ArrayLike, library_size: ArrayLike, *, n_splits: int = 5, seed: int = 0) -> float:
    """Sequencing-depth R^2: how well a cross-validated linear read-out of the embedding recovers log library size.

    ``y = log(library_size)`` is regressed on the embedding by ordinary least squares with an intercept in a
    shuffled, seeded ``n_splits``-fold split (scikit-learn ``KFold``); each cell is predicted by the fit on the other
    folds, and the pooled out-of-fold predictions give ``R^2 = 1 - sum_i (y_i - yhat_i)^2 / sum_i (y_i - mean(y))^2``.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    library_size
        Total raw counts of each cell, shape ``(n_obs,)``; every value must be positive.
    n_splits
        Number of cross-validation folds.
    seed
        Seed of the fold shuffle.

    Returns
    -------
    Score of at most 1; lower is better (the embedding should not encode sequencing depth). 1 means log depth is a
    linear function of the embedding, 0 that the read-out does no better than the mean depth. Not clipped at 0: an
    embedding without depth signal scores slightly below 0 (the out-of-fold noise of the fit, about
    ``-n_features / n_obs``), so read all values at or below 0 as "no linear depth signal".

    Notes
    -----
    Ordinary least squares rather than ridge: it has no tuning constant and is invariant to any invertible linear map
    of the embedding (scale, rotation), so methods whose embeddings differ in scale are compared alike, where a fixed
    ridge penalty would shrink small-scale embeddings more. Cross-validation is the guard against overfitting, which
    needs more cells in every training fold than ``n_features + 1``.

    Depth differs between cell types (e.g. monocytes hold more RNA than lymphocytes), so an embedding that only
    separates cell types already recovers that part; compare methods on the same cells rather than against 0.
    """
    X = check_embedding(X)
    library_size = check_labels(library_size, X.shape[0], name="library_size")
    if library_size.dtype.kind not in "biuf":
        raise ValueError(f"`library_size` must be numeric (total counts per cell); got dtype {library_size.dtype}.")
    library_size = library_size.astype(np.float64)
    if not np.isfinite(library_size).all():
        raise ValueError("`library_size` contains infinite values; pass each cell's finite total counts.")
    if (library_size <= 0).any():
        raise ValueError(
            f"`library_size` has {int((library_size <= 0).sum())} non-positive values (min {library_size.min():.3g}); "
            "log depth is undefined for them. Remove cells with zero total counts."
        )
    if isinstance(n_splits, bool) or not isinstance(n_splits, int | np.integer) or not 2 <= n_splits <= X.shape[0]:
        raise ValueError(f"`n_splits` must be an integer between 2 and n_obs={X.shape[0]}; got {n_splits!r}.")
    n_obs, n_features = X.shape
    # KFold makes the first n_obs % n_splits folds one cell larger; the smallest training set is the rest.
    min_train = n_obs - int(np.ceil(n_obs / n_splits))
    if min_train <= n_features + 1:
        raise skip(
            "Depth R^2",
            f"the smallest training fold holds {min_train} cells for an embedding of {n_features} dimensions; least "
            "squares needs more than n_features + 1 (use more cells or fewer folds).",
        )
    y = np.log(library_size)
    if np.ptp(y) == 0:
        raise skip("Depth R^2", "every cell has the same library size, so there is no depth variance to explain.")
    folds = KFold(n_splits=n_splits, shuffle=True, random_state=seed)
    predicted = cross_val_predict(LinearRegression(), X, y, cv=folds)
    return float(1 - ((y - predicted) ** 2).sum() / ((y - y.mean()) ** 2).sum())


def _strata(modality: np.ndarray, strata: np.ndarray, *, metric: str) -> list[np.ndarray]:
    """Indices of the strata holding at least two cells of every modality level; raise if there are none."""
    levels = require_classes(modality, metric=metric, name="modality", what="modality levels")
    groups = []
    for stratum in np.unique(strata):
        idx = np.flatnonzero(strata == stratum)
        if all((modality[idx] == level).sum() >= 2 for level in levels):
            groups.append(idx)
    if not groups:
        raise skip(metric, "no stratum has at least two cells of every modality level.")
    return groups


def modality_r2(X: ArrayLike, modality: ArrayLike, strata: ArrayLike) -> float:
    """Modality R^2: within-stratum embedding variance explained by the modality centroids, mean over strata.

    ``R_s^2 = sum_m n_sm ||r_sm - r_s||^2 / sum_i ||r_i - r_s||^2`` on L2-normalised embeddings (RQ3 supplement);
    strata are donor x cell-type combinations.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    modality
        Measurement modality of each cell (e.g. scRNA/snRNA), shape ``(n_obs,)``.
    strata
        Stratum of each cell, shape ``(n_obs,)``.

    Returns
    -------
    Score in ``[0, 1]``; lower is better (0: modality explains none of the within-stratum variance).
    """
    X = l2_normalize(check_embedding(X))
    modality = check_labels(modality, X.shape[0], name="modality")
    strata = check_labels(strata, X.shape[0], name="strata")
    scores = []
    for idx in _strata(modality, strata, metric="Modality R^2"):
        R, m = X[idx], modality[idx]
        centre = R.mean(axis=0)
        total = ((R - centre) ** 2).sum()
        between = sum((m == level).sum() * ((R[m == level].mean(axis=0) - centre) ** 2).sum() for level in np.unique(m))
        scores.append(between / total if total > 0 else 0.0)
    return float(np.mean(scores))


@dependencies("scib_metrics")
def modality_asw(X: ArrayLike, modality: ArrayLike, strata: ArrayLike) -> float:
    """Modality ASW: ``1 - mean_i |q_i|`` of the cosine modality silhouette within each stratum, mean over strata.

    Uses scib-metrics ``silhouette_batch`` (cosine, rescaled), whose per-label mean of ``1 - |s_i|`` averaged over
    labels is this definition.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    modality
        Measurement modality of each cell, shape ``(n_obs,)``.
    strata
        Stratum (donor x cell type) of each cell, shape ``(n_obs,)``.

    Returns
    -------
    Score in ``[0, 1]``; higher means modalities are less separable within strata.
    """
    import scib_metrics

    X = check_embedding(X)
    modality = check_labels(modality, X.shape[0], name="modality")
    strata = check_labels(strata, X.shape[0], name="strata")
    keep = np.concatenate(_strata(modality, strata, metric="Modality ASW"))
    return float(scib_metrics.silhouette_batch(X[keep], strata[keep], modality[keep], rescale=True, metric="cosine"))


def conditional_ilisi(X: ArrayLike, modality: ArrayLike, strata: ArrayLike, *, n_neighbors: int = 30) -> float:
    """Conditional iLISI: modality diversity of plain ``n_neighbors``-NN neighbourhoods built within each stratum.

    Per cell ``1 / sum_m p_im^2 - 1`` with ``p_im`` the fraction of its neighbours (cosine, self excluded) from
    modality ``m``, divided by ``M - 1`` (``M`` modality levels; with the paper's two modalities this is the RQ3
    supplement's definition unchanged); averaged over cells, then over strata.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    modality
        Measurement modality of each cell, shape ``(n_obs,)``.
    strata
        Stratum (donor x cell type) of each cell, shape ``(n_obs,)``.
    n_neighbors
        Neighbours per cell, capped at the stratum size minus one.

    Returns
    -------
    Score in ``[0, 1]``; 0 when each neighbourhood holds one modality, 1 when all are equally represented.
    """
    X = l2_normalize(check_embedding(X))
    modality = check_labels(modality, X.shape[0], name="modality")
    strata = check_labels(strata, X.shape[0], name="strata")
    levels, codes = np.unique(modality, return_inverse=True)
    scores = []
    for idx in _strata(modality, strata, metric="Conditional iLISI"):
        k = min(n_neighbors, idx.size - 1)
        neighbors = NearestNeighbors(n_neighbors=k, algorithm="brute", metric="cosine").fit(X[idx]).kneighbors()[1]
        proportions = np.stack([(codes[idx][neighbors] == c).mean(axis=1) for c in range(levels.size)], axis=1)
        scores.append(np.mean((1 / (proportions**2).sum(axis=1) - 1) / (levels.size - 1)))
    return float(np.mean(scores))
