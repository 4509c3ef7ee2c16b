"""Common-cohort metrics (RQ2-RQ3): cross-donor retrieval of cell type and disease state, and donor invariance.

Definitions follow Appendix C.3 (and the C.4 supplement) of :cite:p:`sctrilemma`. Embeddings are L2-normalised, so
cosine similarity is a dot product; neighbour searches are exact, and ties keep the lower index. scib-metrics has
none of these except BRAS, which :func:`~sctrilemma.metrics.conditional_donor_bras` reuses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from scipy.stats import spearmanr

from sctrilemma._normalize import log1p_cp10k
from sctrilemma._validation import check_counts

from ._context import bras
from ._errors import check_embedding, check_labels, l2_normalize, require_classes, skip

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike


def _inputs(
    X: ArrayLike, cell_types: ArrayLike, donors: ArrayLike, states: ArrayLike | None, *, metric: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate and L2-normalise; ``states=None`` puts every cell in one state. Labels come back as int codes."""
    X = l2_normalize(check_embedding(X))
    n_obs = X.shape[0]
    cell_types = check_labels(cell_types, n_obs, name="cell_types")
    donors = check_labels(donors, n_obs, name="donors")
    states = np.zeros(n_obs, dtype=int) if states is None else check_labels(states, n_obs, name="states")
    require_classes(donors, metric=metric, name="donors", what="donors")
    codes = [np.unique(v, return_inverse=True)[1] for v in (cell_types, donors, states)]
    return X, *codes


def _top_k(queries: np.ndarray, references: np.ndarray, k: int) -> np.ndarray:
    """Indices into ``references`` of each query's ``k`` most cosine-similar rows, most similar first."""
    similarity = queries @ references.T
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


def _majority(neighbor_labels: np.ndarray) -> np.ndarray:
    """Most frequent label per row; a tie goes to the tied label met first (i.e. nearest)."""
    counts = np.stack([(neighbor_labels == c).sum(axis=1) for c in range(neighbor_labels.max() + 1)], axis=1)
    rows = np.arange(neighbor_labels.shape[0])[:, None]
    is_winner = counts[rows, neighbor_labels] == counts.max(axis=1, keepdims=True)
    return neighbor_labels[rows[:, 0], is_winner.argmax(axis=1)]


def _balanced(pool: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Subsample ``pool`` to the same number of cells from each label it represents."""
    uniques, counts = np.unique(labels[pool], return_counts=True)
    n = counts.min()
    return np.concatenate([rng.choice(pool[labels[pool] == u], size=n, replace=False) for u in uniques])


def _balanced_accuracy(true: np.ndarray, predicted: np.ndarray) -> float:
    """Mean recall over the classes present in ``true``."""
    return float(np.mean([(predicted[true == c] == c).mean() for c in np.unique(true)]))


def _retrieve(
    X: np.ndarray,
    target: np.ndarray,
    group: np.ndarray,
    donors: np.ndarray,
    *,
    k: int,
    balance: bool,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cross-donor kNN votes for ``target`` with references in the query's ``group`` and from other donors.

    Returns the query indices, their predictions and neighbour purities (queries without references are dropped).
    """
    queries, predictions, purities = [], [], []
    for g in np.unique(group):
        for donor in np.unique(donors[group == g]):
            query = np.flatnonzero((group == g) & (donors == donor))
            pool = np.flatnonzero((group == g) & (donors != donor))
            if pool.size == 0:
                continue
            if balance:
                pool = _balanced(pool, target, rng)
            neighbor_labels = target[pool[_top_k(X[query], X[pool], min(k, pool.size))]]
            queries.append(query)
            predictions.append(_majority(neighbor_labels))
            purities.append((neighbor_labels == target[query][:, None]).mean(axis=1))
    if not queries:
        return np.empty(0, dtype=int), np.empty(0, dtype=int), np.empty(0)
    return np.concatenate(queries), np.concatenate(predictions), np.concatenate(purities)


def celltype_retrieval(
    X: ArrayLike,
    cell_types: ArrayLike,
    donors: ArrayLike,
    states: ArrayLike | None = None,
    *,
    n_neighbors: int = 10,
    seed: int = 42,
) -> dict[str, float]:
    """Cross-donor cell-type retrieval: balanced accuracy minus chance and neighbour purity.

    References for query ``i`` share its disease state and come from other donors; the reference pool is subsampled
    (seeded) to equal counts per cell type, and the prediction is the majority type of the ``n_neighbors`` most
    cosine-similar references. Balanced accuracy is computed within each state, averaged over states and reduced by
    ``1 / C`` (``C``: cell types in the input). Purity, the fraction of neighbours of ``i``'s type, is macro-averaged
    over cell types within each state, then over states.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    cell_types
        Annotated cell type of shape ``(n_obs,)``.
    donors
        Donor of shape ``(n_obs,)``.
    states
        Disease state of shape ``(n_obs,)``; ``None`` treats all cells as one state.
    n_neighbors
        Neighbours per query (capped at the pool size).
    seed
        Seed of the pool balancing.

    Returns
    -------
    ``{"balanced_accuracy_minus_chance", "balanced_accuracy", "neighbor_purity"}``.
    """
    metric = "Cell-type retrieval"
    X, types, donors, states = _inputs(X, cell_types, donors, states, metric=metric)
    require_classes(types, metric=metric, name="cell_types", what="cell types")
    query, predicted, purity = _retrieve(
        X, types, states, donors, k=n_neighbors, balance=True, rng=np.random.default_rng(seed)
    )
    if query.size == 0:
        raise skip(metric, "no disease state holds cells from at least two donors.")
    ba, pur = [], []
    for s in np.unique(states[query]):
        in_state = states[query] == s
        ba.append(_balanced_accuracy(types[query][in_state], predicted[in_state]))
        pur.append(np.mean([purity[in_state & (types[query] == c)].mean() for c in np.unique(types[query][in_state])]))
    n_types = np.unique(types).size
    return {
        "balanced_accuracy_minus_chance": float(np.mean(ba) - 1 / n_types),
        "balanced_accuracy": float(np.mean(ba)),
        "neighbor_purity": float(np.mean(pur)),
    }


def state_retrieval(
    X: ArrayLike,
    cell_types: ArrayLike,
    donors: ArrayLike,
    states: ArrayLike,
    *,
    n_neighbors: int = 10,
    balance_pool: bool = True,
    seed: int = 42,
) -> dict[str, float]:
    """Cross-donor disease-state retrieval: balanced accuracy, accuracy and neighbour purity.

    References for query ``i`` share its cell type and come from other donors; with ``balance_pool`` the pool is
    subsampled (seeded) to equal counts per state. The prediction is the majority state of the ``n_neighbors`` most
    cosine-similar references; each score is computed within a cell type and macro-averaged over the cell types
    whose queries span at least two states. The main RQ2 metric is ``balanced_accuracy`` with the defaults; the
    supplement uses ``n_neighbors=30, balance_pool=False`` and reports all three.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    cell_types
        Annotated cell type of shape ``(n_obs,)``.
    donors
        Donor of shape ``(n_obs,)``.
    states
        Disease state of shape ``(n_obs,)``.
    n_neighbors
        Neighbours per query (capped at the pool size).
    balance_pool
        Whether to balance the reference pool across states.
    seed
        Seed of the pool balancing.

    Returns
    -------
    ``{"balanced_accuracy", "accuracy", "neighbor_purity"}``.
    """
    metric = "Disease-state retrieval"
    if states is None:
        raise skip(metric, "`states` is None; pass the disease state of each cell.")
    X, types, donors, states = _inputs(X, cell_types, donors, states, metric=metric)
    require_classes(states, metric=metric, name="states", what="disease states")
    query, predicted, purity = _retrieve(
        X, states, types, donors, k=n_neighbors, balance=balance_pool, rng=np.random.default_rng(seed)
    )
    ba, accuracy, pur = [], [], []
    for c in np.unique(types[query]):
        of_type = types[query] == c
        true = states[query][of_type]
        if np.unique(true).size < 2:
            continue
        ba.append(_balanced_accuracy(true, predicted[of_type]))
        accuracy.append((predicted[of_type] == true).mean())
        pur.append(purity[of_type].mean())
    if not ba:
        raise skip(metric, "no cell type has cells of at least two states from at least two donors.")
    return {
        "balanced_accuracy": float(np.mean(ba)),
        "accuracy": float(np.mean(accuracy)),
        "neighbor_purity": float(np.mean(pur)),
    }


def _strata(types: np.ndarray, states: np.ndarray) -> np.ndarray:
    """Joint cell-type x state stratum code of each cell."""
    return np.unique(np.stack([types, states], axis=1), axis=0, return_inverse=True)[1].ravel()


def residual_donor_invariance(
    X: ArrayLike, cell_types: ArrayLike, donors: ArrayLike, states: ArrayLike | None = None
) -> float:
    """Residual donor invariance, ``1 - mean_s omega_s^2`` over cell-type x state strata.

    ``omega_s^2 = clip((SS_between - (B_s - 1) MS_within) / (SS_between + SS_within + MS_within), 0, 1)`` from the
    multivariate one-way ANOVA of the L2-normalised embedding on donor, with ``MS_within = SS_within / (n_s - B_s)``.
    Strata with fewer than two donors or no within-donor degrees of freedom (``n_s = B_s``) are skipped.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    cell_types
        Annotated cell type of shape ``(n_obs,)``.
    donors
        Donor of shape ``(n_obs,)``.
    states
        Disease state of shape ``(n_obs,)``; ``None`` stratifies by cell type only.

    Returns
    -------
    Score in ``[0, 1]``; 1 means no embedding variance is attributable to donor within strata.
    """
    metric = "Residual donor invariance"
    X, types, donors, states = _inputs(X, cell_types, donors, states, metric=metric)
    strata = _strata(types, states)
    omegas = []
    for s in np.unique(strata):
        R, b = X[strata == s], donors[strata == s]
        donor_ids = np.unique(b)
        n_s, n_b = R.shape[0], donor_ids.size
        if n_b < 2 or n_s == n_b:
            continue
        centre = R.mean(axis=0)
        ss_between = ss_within = 0.0
        for d in donor_ids:
            group = R[b == d]
            donor_centre = group.mean(axis=0)
            ss_between += group.shape[0] * ((donor_centre - centre) ** 2).sum()
            ss_within += ((group - donor_centre) ** 2).sum()
        ms_within = ss_within / (n_s - n_b)
        denominator = ss_between + ss_within + ms_within
        omega = (ss_between - (n_b - 1) * ms_within) / denominator if denominator > 0 else 0.0
        omegas.append(np.clip(omega, 0.0, 1.0))
    if not omegas:
        raise skip(metric, "no cell-type x state stratum has two donors and more cells than donors.")
    return float(1 - np.mean(omegas))


def conditional_donor_bras(
    X: ArrayLike, cell_types: ArrayLike, donors: ArrayLike, states: ArrayLike | None = None
) -> float:
    """BRAS (:func:`~sctrilemma.metrics.bras`) with cell-type x state strata as the biological labels.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    cell_types
        Annotated cell type of shape ``(n_obs,)``.
    donors
        Donor of shape ``(n_obs,)``.
    states
        Disease state of shape ``(n_obs,)``; ``None`` stratifies by cell type only.

    Returns
    -------
    Score in ``[0, 1]``; 1 means donors are indistinguishable within every stratum.
    """
    metric = "Conditional donor BRAS"
    X, types, donors, states = _inputs(X, cell_types, donors, states, metric=metric)
    return bras(X, _strata(types, states), donors, metric=metric)


def local_donor_mixing(
    X: ArrayLike, cell_types: ArrayLike, donors: ArrayLike, states: ArrayLike | None = None, *, n_neighbors: int = 10
) -> float:
    """Local donor mixing: chance-corrected same-donor enrichment of kNN neighbourhoods within strata.

    In each cell-type x state stratum with at least two donors, ``o_s`` is the fraction of same-donor cells among each
    cell's ``n_neighbors`` most cosine-similar stratum members (self excluded; capped at ``n_s - 1``),
    ``q_s = sum_b n_sb (n_sb - 1) / (n_s (n_s - 1))`` its random-mixing expectation, and
    ``M_s = clip(1 - (o_s - q_s) / (1 - q_s), 0, 1)``; the score is the mean of ``M_s``.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    cell_types
        Annotated cell type of shape ``(n_obs,)``.
    donors
        Donor of shape ``(n_obs,)``.
    states
        Disease state of shape ``(n_obs,)``; ``None`` stratifies by cell type only.
    n_neighbors
        Neighbours per cell.

    Returns
    -------
    Score in ``[0, 1]``; 1 is random (or better) cross-donor mixing, 0 complete same-donor segregation.
    """
    metric = "Local donor mixing"
    X, types, donors, states = _inputs(X, cell_types, donors, states, metric=metric)
    strata = _strata(types, states)
    scores = []
    for s in np.unique(strata):
        R, b = X[strata == s], donors[strata == s]
        n_s = R.shape[0]
        sizes = np.unique(b, return_counts=True)[1]
        if sizes.size < 2:
            continue
        similarity = R @ R.T
        np.fill_diagonal(similarity, -np.inf)
        neighbors = np.argsort(-similarity, axis=1, kind="stable")[:, : min(n_neighbors, n_s - 1)]
        observed = (b[neighbors] == b[:, None]).mean()
        expected = (sizes * (sizes - 1)).sum() / (n_s * (n_s - 1))
        scores.append(np.clip(1 - (observed - expected) / (1 - expected), 0.0, 1.0))
    if not scores:
        raise skip(metric, "no cell-type x state stratum holds cells from at least two donors.")
    return float(np.mean(scores))


def program_scores(X_counts: ArrayLike | sp.spmatrix, gene_sets: Sequence[ArrayLike]) -> np.ndarray:
    """Marker-program scores, ``S_ip = mean_{g in G_p} log1p(1e4 x_ig / l_i)`` with ``l_i`` the cell's total count.

    Parameters
    ----------
    X_counts
        Raw counts of shape ``(n_obs, n_genes)``, dense or sparse.
    gene_sets
        One integer array of gene (column) indices per program.

    Returns
    -------
    Scores of shape ``(n_obs, n_programs)``.
    """
    check_counts(X_counts, where="`X_counts`")
    X = sp.csr_matrix(X_counts, dtype=np.float64)
    totals = np.asarray(X.sum(axis=1)).ravel()
    if (totals == 0).any():
        raise ValueError(f"`X_counts` has {int((totals == 0).sum())} cells with zero total counts; remove them first.")
    columns = []
    for p, genes in enumerate(gene_sets):
        genes = np.asarray(genes, dtype=int)
        if genes.size == 0 or genes.min() < 0 or genes.max() >= X.shape[1]:
            raise ValueError(f"`gene_sets[{p}]` must hold 1+ column indices in [0, {X.shape[1]}); got {genes}.")
        columns.append(np.asarray(log1p_cp10k(X[:, genes], library_size=totals).mean(axis=1)).ravel())
    return np.stack(columns, axis=1)


def program_neighbor_spearman(
    X: ArrayLike, scores: ArrayLike, donors: ArrayLike, *, n_neighbors: int = 30
) -> np.ndarray:
    """Cross-donor lineage-program consistency: Spearman of each program score with its other-donor neighbour mean.

    For each cell, the ``n_neighbors`` most cosine-similar cells from other donors are found and their program scores
    averaged; the Spearman correlation across cells between own and neighbour-mean score is reported per program
    (the paper's macro score is the mean over programs).

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    scores
        Program scores of shape ``(n_obs, n_programs)`` (see :func:`~sctrilemma.metrics.program_scores`).
    donors
        Donor of shape ``(n_obs,)``.
    n_neighbors
        Other-donor neighbours per cell (capped at the pool size).

    Returns
    -------
    Spearman correlations of shape ``(n_programs,)``.
    """
    metric = "Program-neighbour Spearman"
    X = l2_normalize(check_embedding(X))
    scores = check_embedding(scores, name="scores", min_obs=3)
    if scores.shape[0] != X.shape[0]:
        raise ValueError(f"`scores` has {scores.shape[0]} rows but `X` has {X.shape[0]}; they must match.")
    donors = check_labels(donors, X.shape[0], name="donors")
    require_classes(donors, metric=metric, name="donors", what="donors")
    neighbor_mean = np.empty_like(scores)
    for donor in np.unique(donors):
        query, pool = np.flatnonzero(donors == donor), np.flatnonzero(donors != donor)
        neighbors = pool[_top_k(X[query], X[pool], min(n_neighbors, pool.size))]
        neighbor_mean[query] = scores[neighbors].mean(axis=1)
    # Cells with the same neighbourhood must tie in the ranking; summation order would split them at ~1e-16.
    neighbor_mean = np.round(neighbor_mean, 12)
    return np.array([spearmanr(scores[:, p], neighbor_mean[:, p]).statistic for p in range(scores.shape[1])])
