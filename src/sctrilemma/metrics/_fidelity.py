"""Expression-fidelity metrics (RQ4): differential-expression concordance and direct reconstruction agreement.

All functions compare an observed matrix with a reconstruction of the same cells and genes
:cite:p:`sctrilemma` (Appendix C, "Expression fidelity" and "Supplementary Expression-Fidelity
Metrics"). Observed counts and reconstructed means are normalised *independently* to
``log1p(CP10K)`` over the genes passed in, so that model-specific output scales do not drive the
scores; pass ``normalize=False`` when both inputs are already on that scale.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.stats import rankdata

from sctrilemma._normalize import log1p_cp10k
from sctrilemma._validation import ROW_CHUNK

if TYPE_CHECKING:
    from collections.abc import Hashable

    from numpy.typing import ArrayLike

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- validation helpers
def _as_matrix(matrix, *, name: str, nonnegative: bool) -> np.ndarray | sp.csr_matrix:
    """Dense float64 array or CSR matrix, checked to be 2-D, non-empty, finite (and non-negative)."""
    if sp.issparse(matrix):
        matrix = sp.csr_matrix(matrix, dtype=np.float64)
        values = matrix.data
    else:
        matrix = np.asarray(matrix, dtype=np.float64)
        values = matrix
    if matrix.ndim != 2:
        raise ValueError(f"`{name}` must be a 2-D cells x genes matrix; got shape {matrix.shape}.")
    if matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise ValueError(f"`{name}` is empty (shape {matrix.shape}); pass at least one cell and one gene.")
    if not np.isfinite(values).all():
        raise ValueError(
            f"`{name}` contains NaN or infinite values; remove the affected cells/genes or fill them before scoring."
        )
    if nonnegative and values.size and values.min() < 0:
        raise ValueError(
            f"`{name}` contains negative values (min {values.min():.3g}) but `normalize=True` expects counts or "
            "non-negative expected counts. Pass raw counts / decoder means, or `normalize=False` for data that is "
            "already log1p(CP10K)-normalised."
        )
    return matrix


def _check_pair(observed, reconstructed, *, normalize: bool) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
    observed = _as_matrix(observed, name="observed", nonnegative=normalize)
    reconstructed = _as_matrix(reconstructed, name="reconstructed", nonnegative=normalize)
    if observed.shape != reconstructed.shape:
        raise ValueError(
            f"`observed` has shape {observed.shape} but `reconstructed` has shape {reconstructed.shape}; "
            "align both to the same cells (rows) and genes (columns) first."
        )
    return observed, reconstructed


def _check_min_detection(min_detection: float, *, upper: float) -> None:
    if not 0.0 <= min_detection < upper:
        raise ValueError(f"`min_detection={min_detection}` must lie in [0, {upper:g}); the paper uses 0.02.")


def _contrast_masks(
    groups: ArrayLike, n_cells: int, group: Hashable, reference: Hashable | None, min_cells: int
) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks ``(n_cells,)`` of the ``group`` cells and of the reference (or all other) cells."""
    labels = pd.Series(np.asarray(groups, dtype=object).ravel())
    if labels.shape[0] != n_cells:
        raise ValueError(
            f"`groups` has {labels.shape[0]} labels for {n_cells} cells; pass one label per row of `observed`."
        )
    if labels.isna().any():
        raise ValueError(f"`groups` has {int(labels.isna().sum())} missing labels; fill or drop those cells.")
    classes = pd.unique(labels)
    if len(classes) < 2:
        raise ValueError(
            f"`groups` has a single class ({classes[0]!r}); a contrast needs at least two groups, e.g. disease "
            "and normal cells of one cell type."
        )
    values = labels.to_numpy()
    positive = values == group
    if not positive.any():
        raise ValueError(f"`group={group!r}` is not among the labels in `groups` ({list(classes)[:10]}).")
    if reference is None:
        negative = ~positive
    else:
        if reference == group:
            raise ValueError(f"`reference` equals `group` ({group!r}); pass two different labels.")
        negative = values == reference
        if not negative.any():
            raise ValueError(f"`reference={reference!r}` is not among the labels in `groups` ({list(classes)[:10]}).")
    if min_cells < 1:
        raise ValueError(f"`min_cells={min_cells}` must be at least 1.")
    for name, mask in (("group", positive), ("reference", negative)):
        if mask.sum() < min_cells:
            raise ValueError(
                f"The `{name}` side of the contrast has {int(mask.sum())} cells, fewer than `min_cells={min_cells}`. "
                "Pool more cells, choose a better-supported contrast, or lower `min_cells`."
            )
    return positive, negative


# ----------------------------------------------------------------------------- numerics
def _group_mean(matrix: np.ndarray | sp.csr_matrix, mask: np.ndarray) -> np.ndarray:
    return np.asarray(matrix[mask].mean(axis=0), dtype=np.float64).ravel()


def _detection_rate(matrix: np.ndarray | sp.csr_matrix, mask: np.ndarray) -> np.ndarray:
    block = matrix[mask]
    detected = (block > 0).sum(axis=0)
    return np.asarray(detected, dtype=np.float64).ravel() / mask.sum()


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two vectors; NaN when either is constant."""
    a = a - a.mean()
    b = b - b.mean()
    denominator = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denominator) if denominator > 0 else float("nan")


def _spearman(a: ArrayLike, b: ArrayLike) -> float:
    """Spearman correlation (average ranks for ties); NaN when either vector is constant."""
    return _pearson(rankdata(np.asarray(a, dtype=np.float64)), rankdata(np.asarray(b, dtype=np.float64)))


def _rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-row Pearson ``(n_rows,)``; NaN for rows where either side is constant."""
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    denominator = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    out = np.full(a.shape[0], np.nan)
    valid = denominator > 0
    out[valid] = (a[valid] * b[valid]).sum(axis=1) / denominator[valid]
    return out


def _dense_rows(matrix: np.ndarray | sp.csr_matrix, start: int, stop: int) -> np.ndarray:
    block = matrix[start:stop]
    return block.toarray() if sp.issparse(block) else np.asarray(block)


def _top_abs(values: np.ndarray, n_top: int) -> np.ndarray:
    """Indices of the ``n_top`` largest ``|values|``; ties broken by position, so the result is deterministic."""
    return np.argsort(-np.abs(values), kind="stable")[:n_top]


# ----------------------------------------------------------------------------- contrast metrics
def contrast_logfc(
    expression,
    groups: ArrayLike,
    group: Hashable,
    reference: Hashable | None = None,
    *,
    normalize: bool = True,
    min_cells: int = 40,
) -> np.ndarray:
    r"""Expression change of a contrast, :math:`\Delta_g = \bar{\tilde x}_{g,+} - \bar{\tilde x}_{g,-}`.

    The mean ``log1p(CP10K)`` of the ``group`` cells minus that of the ``reference`` cells (all other
    cells when ``reference`` is ``None``), as in the paper's expression-fidelity definition.

    Parameters
    ----------
    expression
        Counts or expected counts ``(n_cells, n_genes)``, dense or sparse.
    groups
        Label of each cell ``(n_cells,)``, e.g. disease state within one cell type.
    group
        The label of the positive side (e.g. the disease).
    reference
        The label of the negative side (e.g. ``"normal"``); ``None`` compares ``group`` against the rest.
    normalize
        Normalise ``expression`` to ``log1p(CP10K)`` over the given genes first.
    min_cells
        Minimum number of cells on each side. The paper's contrasts required 40 cells per state.

    Returns
    -------
    Mean differences ``(n_genes,)``.
    """
    expression = _as_matrix(expression, name="expression", nonnegative=normalize)
    positive, negative = _contrast_masks(groups, expression.shape[0], group, reference, min_cells)
    if normalize:
        expression = log1p_cp10k(expression)
    return _group_mean(expression, positive) - _group_mean(expression, negative)


def logfc_spearman(observed_logfc: ArrayLike, reconstructed_logfc: ArrayLike) -> float:
    r"""Spearman correlation of observed and reconstructed changes, :math:`\rho_{\mathrm{logFC}}`.

    Parameters
    ----------
    observed_logfc, reconstructed_logfc
        Changes over the same retained genes, ``(n_genes,)`` each.

    Returns
    -------
    Correlation in ``[-1, 1]``; NaN if either vector is constant.
    """
    observed_logfc, reconstructed_logfc = _check_logfc_pair(observed_logfc, reconstructed_logfc)
    return _spearman(observed_logfc, reconstructed_logfc)


def _check_logfc_pair(observed_logfc: ArrayLike, reconstructed_logfc: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    observed = np.asarray(observed_logfc, dtype=np.float64).ravel()
    reconstructed = np.asarray(reconstructed_logfc, dtype=np.float64).ravel()
    if observed.shape != reconstructed.shape:
        raise ValueError(
            f"`observed_logfc` has {observed.shape[0]} genes but `reconstructed_logfc` has {reconstructed.shape[0]}; "
            "compute both over the same genes."
        )
    for name, values in (("observed_logfc", observed), ("reconstructed_logfc", reconstructed)):
        if not np.isfinite(values).all():
            raise ValueError(f"`{name}` contains NaN or infinite values; drop those genes from both vectors first.")
    return observed, reconstructed


def _check_n_top(n_top: int, n_genes: int) -> None:
    if n_top < 1:
        raise ValueError(f"`n_top={n_top}` must be at least 1.")
    if n_genes <= n_top:
        raise ValueError(
            f"Only {n_genes} genes are scored but `n_top={n_top}`: the top sets would be every gene and the overlap "
            "trivially 1. Pass more genes or a smaller `n_top`."
        )


def top_deg_jaccard(observed_logfc: ArrayLike, reconstructed_logfc: ArrayLike, *, n_top: int = 100) -> float:
    r"""Top-``n_top`` DEG Jaccard :math:`J_{\mathrm{DEG}} = |T\cap\hat T| / |T\cup\hat T|`, genes ranked by ``|logFC|``.

    Parameters
    ----------
    observed_logfc, reconstructed_logfc
        Changes over the same retained genes, ``(n_genes,)`` each.
    n_top
        Size of the top sets :math:`T` (observed) and :math:`\hat T` (reconstructed).

    Returns
    -------
    Overlap in ``[0, 1]``.
    """
    observed, reconstructed = _check_logfc_pair(observed_logfc, reconstructed_logfc)
    _check_n_top(n_top, observed.shape[0])
    top_observed = set(_top_abs(observed, n_top).tolist())
    top_reconstructed = set(_top_abs(reconstructed, n_top).tolist())
    return len(top_observed & top_reconstructed) / len(top_observed | top_reconstructed)


def deg_sign_concordance(observed_logfc: ArrayLike, reconstructed_logfc: ArrayLike, *, n_top: int = 100) -> float:
    r"""Sign concordance :math:`S_{\mathrm{DEG}}`: share of the observed top-``n_top`` genes changing the same way.

    Parameters
    ----------
    observed_logfc, reconstructed_logfc
        Changes over the same retained genes, ``(n_genes,)`` each.
    n_top
        Size of the observed top set :math:`T` (by ``|logFC|``).

    Returns
    -------
    Fraction in ``[0, 1]``.
    """
    observed, reconstructed = _check_logfc_pair(observed_logfc, reconstructed_logfc)
    _check_n_top(n_top, observed.shape[0])
    top = _top_abs(observed, n_top)
    return float(np.mean(np.sign(observed[top]) == np.sign(reconstructed[top])))


def differential_expression_concordance(
    observed,
    reconstructed,
    groups: ArrayLike,
    group: Hashable,
    reference: Hashable | None = None,
    *,
    n_top: int = 100,
    min_detection: float = 0.02,
    min_cells: int = 40,
    normalize: bool = True,
) -> dict[str, float]:
    r"""Score one contrast: logFC Spearman, top-``n_top`` DEG Jaccard and sign concordance.

    Both matrices are normalised independently to ``log1p(CP10K)`` over all given genes; then genes whose
    summed observed detection rate in the two groups, :math:`d_g`, exceeds ``min_detection`` are kept and
    :math:`\Delta_g`, :math:`\hat\Delta_g` are compared on them (paper Appendix C, "Expression fidelity").

    Parameters
    ----------
    observed
        Observed counts ``(n_cells, n_genes)``, dense or sparse.
    reconstructed
        Reconstruction of the same cells and genes ``(n_cells, n_genes)``, e.g. decoder means.
    groups
        Label of each cell ``(n_cells,)``.
    group
        Label of the positive side (e.g. the disease).
    reference
        Label of the negative side (e.g. ``"normal"``); ``None`` uses all other cells.
    n_top
        Size of the top-gene sets.
    min_detection
        Threshold on :math:`d_g`, the sum of the two groups' observed detection rates (strictly greater).
    min_cells
        Minimum number of cells on each side (the paper's eligibility threshold is 40).
    normalize
        Normalise both inputs to ``log1p(CP10K)``; ``False`` if they already are.

    Returns
    -------
    ``{"logfc_spearman", "deg_jaccard", "deg_sign_concordance", "n_genes"}``; ``n_genes`` is the number of
    retained genes.
    """
    _check_min_detection(min_detection, upper=2.0)
    observed, reconstructed = _check_pair(observed, reconstructed, normalize=normalize)
    positive, negative = _contrast_masks(groups, observed.shape[0], group, reference, min_cells)
    # log1p(CP10K) > 0 exactly where the count is > 0, so detection works on either scale.
    detection = _detection_rate(observed, positive) + _detection_rate(observed, negative)
    keep = detection > min_detection
    if keep.sum() <= n_top:
        raise ValueError(
            f"Only {int(keep.sum())} genes pass the detection filter (`min_detection={min_detection}`), not more than "
            f"`n_top={n_top}`. Pass more genes, a lower `min_detection` or a smaller `n_top`."
        )
    if normalize:
        observed, reconstructed = log1p_cp10k(observed), log1p_cp10k(reconstructed)
    observed_logfc = (_group_mean(observed, positive) - _group_mean(observed, negative))[keep]
    reconstructed_logfc = (_group_mean(reconstructed, positive) - _group_mean(reconstructed, negative))[keep]
    return {
        "logfc_spearman": logfc_spearman(observed_logfc, reconstructed_logfc),
        "deg_jaccard": top_deg_jaccard(observed_logfc, reconstructed_logfc, n_top=n_top),
        "deg_sign_concordance": deg_sign_concordance(observed_logfc, reconstructed_logfc, n_top=n_top),
        "n_genes": int(keep.sum()),
    }


# ----------------------------------------------------------------------------- direct agreement
def reconstruction_agreement(
    observed,
    reconstructed,
    *,
    min_detection: float = 0.02,
    normalize: bool = True,
    chunk_size: int = ROW_CHUNK,
) -> dict[str, float]:
    r"""Direct agreement of a reconstruction with observed expression (the paper's secondary diagnostic).

    Genes detected (observed > 0) in at least ``min_detection`` of the cells are kept, both matrices are
    normalised independently to ``log1p(CP10K)`` on those genes, and

    - ``pearson`` / ``spearman``: correlation across genes within each cell, averaged over cells
      (cells where either profile is constant are left out of the mean);
    - ``mae`` / ``mse``: mean of :math:`|\hat{\tilde x}_{ig}-\tilde x_{ig}|` and its square over all cells and genes.

    Parameters
    ----------
    observed
        Observed counts ``(n_cells, n_genes)``, dense or sparse.
    reconstructed
        Reconstruction of the same cells and genes ``(n_cells, n_genes)``.
    min_detection
        Minimum fraction of cells in which a gene must be observed (inclusive); ``0`` keeps all genes.
    normalize
        Normalise both inputs to ``log1p(CP10K)`` on the kept genes; ``False`` if they already are.
    chunk_size
        Cells per dense block, bounding memory for sparse input.

    Returns
    -------
    ``{"pearson", "spearman", "mae", "mse", "n_genes", "n_cells"}``; ``n_cells`` counts the cells entering the
    correlation means.
    """
    _check_min_detection(min_detection, upper=1.0)
    observed, reconstructed = _check_pair(observed, reconstructed, normalize=normalize)
    all_cells = np.ones(observed.shape[0], dtype=bool)
    keep = _detection_rate(observed, all_cells) >= min_detection
    if keep.sum() < 2:
        raise ValueError(
            f"Only {int(keep.sum())} genes are detected in at least `min_detection={min_detection}` of the cells; "
            "per-cell correlations need at least two. Lower `min_detection` or pass more genes."
        )
    observed, reconstructed = observed[:, keep], reconstructed[:, keep]
    if normalize:
        observed, reconstructed = log1p_cp10k(observed), log1p_cp10k(reconstructed)
    pearson, spearman = [], []
    abs_sum = sq_sum = 0.0
    for start in range(0, observed.shape[0], chunk_size):
        stop = min(start + chunk_size, observed.shape[0])
        obs_block, rec_block = _dense_rows(observed, start, stop), _dense_rows(reconstructed, start, stop)
        difference = rec_block - obs_block
        abs_sum += float(np.abs(difference).sum())
        sq_sum += float((difference * difference).sum())
        pearson.append(_rowwise_pearson(obs_block, rec_block))
        spearman.append(_rowwise_pearson(rankdata(obs_block, axis=1), rankdata(rec_block, axis=1)))
    pearson_all, spearman_all = np.concatenate(pearson), np.concatenate(spearman)
    n_entries = observed.shape[0] * observed.shape[1]
    valid = np.isfinite(pearson_all)
    return {
        "pearson": float(pearson_all[valid].mean()) if valid.any() else float("nan"),
        "spearman": float(spearman_all[valid].mean()) if valid.any() else float("nan"),
        "mae": abs_sum / n_entries,
        "mse": sq_sum / n_entries,
        "n_genes": int(keep.sum()),
        "n_cells": int(valid.sum()),
    }


def hvg_pearson(
    observed_counts,
    reconstructed_mean,
    *,
    n_top_genes: int = 2000,
    chunk_size: int = ROW_CHUNK,
) -> float:
    """Per-cell Pearson between raw counts and the decoder mean on the highest-variance genes.

    The ``n_top_genes`` genes with the largest raw-count variance (population variance over cells, genes with
    zero variance excluded) are selected; the correlation across those genes is computed in each cell on the
    *unnormalised* values and averaged over cells whose profiles are not constant (paper Appendix C,
    "HVG Pearson").

    Parameters
    ----------
    observed_counts
        Raw counts ``(n_cells, n_genes)``, dense or sparse.
    reconstructed_mean
        Expected counts of the same cells and genes ``(n_cells, n_genes)`` (e.g. the ZINB mean).
    n_top_genes
        Number of highest-variance genes; all variable genes are used when fewer exist.
    chunk_size
        Cells per dense block.

    Returns
    -------
    Mean per-cell Pearson; NaN when no cell has a non-constant profile on both sides.
    """
    observed, reconstructed = _check_pair(observed_counts, reconstructed_mean, normalize=True)
    if n_top_genes < 2:
        raise ValueError(f"`n_top_genes={n_top_genes}` must be at least 2 for a per-cell correlation.")
    if sp.issparse(observed):
        mean = np.asarray(observed.mean(axis=0)).ravel()
        variance = np.asarray(observed.multiply(observed).mean(axis=0)).ravel() - mean**2
    else:
        variance = observed.var(axis=0)
    variable = np.flatnonzero(variance > 0)
    if variable.size < 2:
        raise ValueError("Fewer than two genes vary across cells in `observed_counts`; HVG Pearson is undefined.")
    order = np.argsort(-variance[variable], kind="stable")[:n_top_genes]
    genes = np.sort(variable[order])
    observed, reconstructed = observed[:, genes], reconstructed[:, genes]
    correlations = [
        _rowwise_pearson(_dense_rows(observed, start, stop), _dense_rows(reconstructed, start, stop))
        for start, stop in (
            (s, min(s + chunk_size, observed.shape[0])) for s in range(0, observed.shape[0], chunk_size)
        )
    ]
    values = np.concatenate(correlations)
    return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")
