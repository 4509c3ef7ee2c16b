from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose
from scipy.stats import spearmanr
from sklearn.metrics import balanced_accuracy_score
from sklearn.neighbors import NearestNeighbors

from sctrilemma.metrics._cohort import (
    _balanced,
    celltype_retrieval,
    conditional_donor_bras,
    local_donor_mixing,
    program_neighbor_spearman,
    program_scores,
    residual_donor_invariance,
    state_retrieval,
)
from sctrilemma.metrics._context import bras
from sctrilemma.metrics._errors import MetricSkipped

pytest.importorskip("scib_metrics")

DONORS = {"normal": ("n1", "n2"), "disease": ("d1", "d2")}


def _cohort(
    type_sep: float, state_shift: float = 0.0, donor_shift: float = 0.0, noise: float = 1.0, n: int = 10, seed: int = 0
) -> tuple[np.ndarray, ...]:
    """The paper's repeat design: 3 cell types x 2 states x 2 donors per state x ``n`` cells (120 with n=10)."""
    rng = np.random.default_rng(seed)
    type_dir = {t: rng.normal(0, 1, 8) for t in "ABC"}
    state_dir = rng.normal(0, 1, 8)
    donor_dir = {d: rng.normal(0, 1, 8) for ds in DONORS.values() for d in ds}
    X, types, states, donors = [], [], [], []
    for state, state_donors in DONORS.items():
        for donor in state_donors:
            for t in "ABC":
                centre = 5.0 + type_sep * type_dir[t] + state_shift * (state == "disease") * state_dir
                X.append(centre + donor_shift * donor_dir[donor] + rng.normal(0, noise, (n, 8)))
                types += [t] * n
                states += [state] * n
                donors += [donor] * n
    return np.concatenate(X), np.array(types), np.array(donors), np.array(states)


def _knn_vote(X, query, pool, target, k):
    """Independent cross-donor vote: sklearn cosine kNN, Counter majority (ties: nearest first)."""
    neighbors = NearestNeighbors(n_neighbors=min(k, len(pool)), metric="cosine").fit(X[pool])
    idx = pool[neighbors.kneighbors(X[query], return_distance=False)]
    predictions = np.array([Counter(target[row]).most_common(1)[0][0] for row in idx])
    purity = (target[idx] == target[query][:, None]).mean(axis=1)
    return predictions, purity


def test_celltype_retrieval_separated_types():
    X, types, donors, states = _cohort(type_sep=4.0, noise=0.2)
    scores = celltype_retrieval(X, types, donors, states)
    assert scores["balanced_accuracy"] == pytest.approx(1.0)
    assert scores["balanced_accuracy_minus_chance"] == pytest.approx(1 - 1 / 3)
    assert scores["neighbor_purity"] == pytest.approx(1.0)


def test_celltype_retrieval_random_embedding_is_near_chance():
    X, types, donors, states = _cohort(type_sep=0.0)
    scores = celltype_retrieval(X, types, donors, states)
    assert abs(scores["balanced_accuracy_minus_chance"]) < 0.2
    assert scores["neighbor_purity"] < 0.55


def test_celltype_retrieval_matches_brute_force():
    # Every pool here is one other donor with 10 cells of each type, i.e. already balanced.
    X, types, donors, states = _cohort(type_sep=0.7, donor_shift=0.5)
    scores = celltype_retrieval(X, types, donors, states)
    ba, purity = [], []
    for state, state_donors in DONORS.items():
        true, predicted, pur = [], [], []
        for donor in state_donors:
            query = np.flatnonzero((states == state) & (donors == donor))
            pool = np.flatnonzero((states == state) & (donors != donor))
            p, q = _knn_vote(X, query, pool, types, 10)
            true.append(types[query])
            predicted.append(p)
            pur.append(q)
        true, predicted, pur = map(np.concatenate, (true, predicted, pur))
        ba.append(balanced_accuracy_score(true, predicted))
        purity.append(np.mean([pur[true == t].mean() for t in "ABC"]))
    assert 0.1 < scores["balanced_accuracy_minus_chance"] < 0.6
    assert_allclose(scores["balanced_accuracy_minus_chance"], np.mean(ba) - 1 / 3, rtol=1e-12)
    assert_allclose(scores["neighbor_purity"], np.mean(purity), rtol=1e-12)


def test_retrieval_is_seeded_when_pools_are_subsampled():
    X, types, donors, states = _cohort(type_sep=0.5, state_shift=0.5)
    keep = ~((types == "A") & (np.arange(types.size) % 10 < 6))  # type A under-represented: pools get balanced
    args = (X[keep], types[keep], donors[keep], states[keep])
    assert celltype_retrieval(*args, seed=3) == celltype_retrieval(*args, seed=3)
    assert state_retrieval(*args, seed=3) == state_retrieval(*args, seed=3)


def test_balanced_pool_has_equal_label_counts():
    labels = np.array([0] * 30 + [1] * 10 + [2] * 12)
    pool = np.arange(labels.size)
    chosen = _balanced(pool, labels, np.random.default_rng(0))
    assert np.unique(labels[chosen], return_counts=True)[1].tolist() == [10, 10, 10]
    assert np.unique(chosen).size == chosen.size


def test_state_retrieval_separated_and_unseparated_states():
    X, types, donors, states = _cohort(type_sep=2.0, state_shift=4.0, noise=0.2)
    scores = state_retrieval(X, types, donors, states)
    assert scores == pytest.approx({"balanced_accuracy": 1.0, "accuracy": 1.0, "neighbor_purity": 1.0})
    X, types, donors, states = _cohort(type_sep=2.0, state_shift=0.0)
    assert state_retrieval(X, types, donors, states)["balanced_accuracy"] < 0.75


def test_state_retrieval_balancing_removes_the_majority_state_bias():
    # A query's own state loses its donor from the pool (1 same-state vs 2 other-state donors): unbalanced votes
    # drift to the other state, balanced votes do not.
    X, types, donors, states = _cohort(type_sep=2.0, state_shift=0.6, donor_shift=0.3)
    balanced = state_retrieval(X, types, donors, states)["balanced_accuracy"]
    unbalanced = state_retrieval(X, types, donors, states, balance_pool=False)["balanced_accuracy"]
    assert balanced > unbalanced + 0.2


def test_state_retrieval_matches_brute_force_without_balancing():
    X, types, donors, states = _cohort(type_sep=2.0, state_shift=1.5, donor_shift=0.3)
    scores = state_retrieval(X, types, donors, states, n_neighbors=10, balance_pool=False)
    ba, accuracy, purity = [], [], []
    for t in "ABC":
        true, predicted, pur = [], [], []
        for donor in np.unique(donors):
            query = np.flatnonzero((types == t) & (donors == donor))
            pool = np.flatnonzero((types == t) & (donors != donor))
            p, q = _knn_vote(X, query, pool, states, 10)
            true.append(states[query])
            predicted.append(p)
            pur.append(q)
        true, predicted, pur = map(np.concatenate, (true, predicted, pur))
        ba.append(balanced_accuracy_score(true, predicted))
        accuracy.append((true == predicted).mean())
        purity.append(pur.mean())
    assert 0.55 < scores["balanced_accuracy"] < 0.95
    assert_allclose(
        [scores["balanced_accuracy"], scores["accuracy"], scores["neighbor_purity"]],
        [np.mean(ba), np.mean(accuracy), np.mean(purity)],
        rtol=1e-12,
    )


def test_residual_donor_invariance_extremes_and_reference():
    X, types, donors, states = _cohort(type_sep=3.0, donor_shift=3.0, noise=0.1)
    assert residual_donor_invariance(X, types, donors, states) < 0.2
    X, types, donors, states = _cohort(type_sep=3.0, donor_shift=0.0)
    assert residual_donor_invariance(X, types, donors, states) > 0.9
    X, types, donors, states = _cohort(type_sep=3.0, donor_shift=0.3)
    R = X / np.linalg.norm(X, axis=1, keepdims=True)
    omegas = []  # SS_between from SS_total - SS_within rather than from the centroids
    for t in "ABC":
        for state in DONORS:
            Rs, bs = R[(types == t) & (states == state)], donors[(types == t) & (states == state)]
            ss_total = ((Rs - Rs.mean(0)) ** 2).sum()
            ss_within = sum(((Rs[bs == b] - Rs[bs == b].mean(0)) ** 2).sum() for b in np.unique(bs))
            ms_within = ss_within / (len(Rs) - 2)
            omegas.append(np.clip((ss_total - ss_within - ms_within) / (ss_total + ms_within), 0, 1))
    assert_allclose(residual_donor_invariance(X, types, donors, states), 1 - np.mean(omegas), rtol=1e-10)


def test_residual_donor_invariance_hand_computed():
    # Donors at orthogonal directions with no spread: omega^2 = 1, invariance 0.
    X = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    types, donors = np.array(["A"] * 4), np.array(["a", "a", "b", "b"])
    assert residual_donor_invariance(X, types, donors) == pytest.approx(0.0)
    # Identical donor clouds: SS_between = 0, omega^2 = clip(-MS_within / ...) = 0, invariance 1.
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert residual_donor_invariance(X, types, donors) == pytest.approx(1.0)


def test_conditional_donor_bras_is_bras_over_type_state_strata():
    X, types, donors, states = _cohort(type_sep=2.0, state_shift=1.0, donor_shift=0.5)
    strata = np.char.add(np.char.add(types, "|"), states)
    score = conditional_donor_bras(X, types, donors, states)
    assert_allclose(score, bras(X, strata, donors), rtol=1e-5)
    assert conditional_donor_bras(*_cohort(type_sep=2.0, donor_shift=3.0, noise=0.05)) < 0.2
    assert conditional_donor_bras(*_cohort(type_sep=2.0)) > 0.8


def _circle(n: int, donors: np.ndarray, arc: float) -> np.ndarray:
    angles = np.linspace(0, arc, n, endpoint=False)
    return np.stack([np.cos(angles), np.sin(angles)], axis=1)


def test_local_donor_mixing_hand_computed():
    types = np.array(["A"] * 20)
    alternating = np.array(["a", "b"] * 10)
    # Around a full circle the 10 neighbours are +-1..+-5 steps: 4 same-donor (o = 0.4) < q = 180/380 -> M = 1.
    assert local_donor_mixing(_circle(20, alternating, 2 * np.pi), types, alternating) == 1.0
    # Two tight donor arcs 90 degrees apart, 10 cells each: 9 of 10 neighbours same-donor, o = 0.9.
    segregated = np.concatenate([_circle(10, None, 0.05), _circle(10, None, 0.05) @ np.array([[0, 1], [-1, 0]])])
    blocks = np.repeat(np.array(["a", "b"]), 10)
    q = 180 / 380
    assert local_donor_mixing(segregated, types, blocks) == pytest.approx(1 - (0.9 - q) / (1 - q))
    assert local_donor_mixing(segregated, types, blocks, n_neighbors=5) == 0.0  # o = 1: complete segregation


def test_local_donor_mixing_matches_sklearn_neighbors():
    X, types, donors, states = _cohort(type_sep=2.0, donor_shift=0.4)
    expected = []
    for t in "ABC":
        for state in DONORS:
            idx = np.flatnonzero((types == t) & (states == state))
            nbrs = NearestNeighbors(n_neighbors=10, metric="cosine").fit(X[idx]).kneighbors(return_distance=False)
            observed = (donors[idx][nbrs] == donors[idx][:, None]).mean()
            q = 2 * 10 * 9 / (20 * 19)
            expected.append(np.clip(1 - (observed - q) / (1 - q), 0, 1))
    score = local_donor_mixing(X, types, donors, states)
    assert 0.05 < score < 0.95
    assert_allclose(score, np.mean(expected), rtol=1e-12)


def test_program_scores_hand_computed():
    counts = np.array([[1, 3, 0], [2, 2, 4]])
    expected = np.array(
        [
            [(np.log1p(2500) + np.log1p(7500)) / 2, 0.0],
            [np.log1p(2500), np.log1p(5000)],
        ]
    )
    assert_allclose(program_scores(counts, [[0, 1], [2]]), expected)
    assert_allclose(program_scores(sp.csr_matrix(counts), [[0, 1], [2]]), expected)
    with pytest.raises(ValueError, match=r"`gene_sets\[0\]` must hold 1\+ column indices"):
        program_scores(counts, [[5]])


def test_program_neighbor_spearman_tracks_program_geometry():
    rng = np.random.default_rng(0)
    scores = rng.uniform(0, 1, (150, 2))
    donors = rng.choice(np.array(["a", "b", "c"]), 150)
    angle = scores[:, 0] * np.pi / 2  # embedding direction encodes program 0 only
    X = np.stack([np.cos(angle), np.sin(angle), 0.05 * rng.normal(size=150)], axis=1)
    rho = program_neighbor_spearman(X, scores, donors)
    assert rho[0] > 0.9
    assert abs(rho[1]) < 0.3
    expected = []
    for p in range(2):
        neighbor_mean = np.empty(150)
        for d in np.unique(donors):
            query, pool = np.flatnonzero(donors == d), np.flatnonzero(donors != d)
            idx = NearestNeighbors(n_neighbors=30, metric="cosine").fit(X[pool]).kneighbors(X[query])[1]
            neighbor_mean[query] = scores[pool[idx], p].mean(axis=1)
        expected.append(spearmanr(scores[:, p], np.round(neighbor_mean, 12)).statistic)  # equal neighbourhoods tie
    assert_allclose(rho, expected, rtol=1e-12)


@pytest.mark.parametrize(
    "fn",
    [celltype_retrieval, state_retrieval, residual_donor_invariance, conditional_donor_bras, local_donor_mixing],
)
def test_one_donor_cannot_be_scored(fn):
    X, types, _, states = _cohort(type_sep=1.0)
    with pytest.raises(MetricSkipped, match="cannot be computed: `donors` has 1 distinct donors"):
        fn(X, types, np.full(types.size, "n1"), states)


def test_cohort_specific_errors():
    X, types, donors, states = _cohort(type_sep=1.0)
    with pytest.raises(MetricSkipped, match="^Cell-type retrieval cannot be computed: `cell_types` has 1 distinct"):
        celltype_retrieval(X, np.full(types.size, "A"), donors, states)
    with pytest.raises(MetricSkipped, match="^Disease-state retrieval cannot be computed: `states` is None"):
        state_retrieval(X, types, donors, None)
    with pytest.raises(MetricSkipped, match="^Disease-state retrieval cannot be computed: `states` has 1 distinct"):
        state_retrieval(X, types, donors, np.full(types.size, "normal"))
    segregating = np.where(types == "A", "n1", "n2")  # every stratum holds a single donor
    with pytest.raises(MetricSkipped, match="^Residual donor invariance cannot be computed: no cell-type x state"):
        residual_donor_invariance(X, types, segregating, states)
    with pytest.raises(MetricSkipped, match="^Local donor mixing cannot be computed: no cell-type x state"):
        local_donor_mixing(X, types, segregating, states)
    with pytest.raises(MetricSkipped, match="^Conditional donor BRAS cannot be computed: no cell type"):
        conditional_donor_bras(X, types, segregating, states)


def test_bad_embeddings_are_rejected():
    X, types, donors, states = _cohort(type_sep=1.0)
    X_zero, X_nan = X.copy(), X.copy()
    X_zero[4] = 0.0
    X_nan[4, 2] = np.nan
    with pytest.raises(ValueError, match="`X` has 1 all-zero rows"):
        celltype_retrieval(X_zero, types, donors, states)
    with pytest.raises(ValueError, match="`X` contains NaN or infinite values in 1 rows"):
        local_donor_mixing(X_nan, types, donors, states)
    with pytest.raises(ValueError, match="`states` has 119 entries but the embedding has 120 rows"):
        residual_donor_invariance(X, types, donors, states[1:])
