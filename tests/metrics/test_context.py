from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose
from scipy.spatial.distance import cdist
from sklearn.decomposition import PCA
from sklearn.metrics import silhouette_samples
from sklearn.model_selection import KFold
from sklearn.neighbors import NearestNeighbors

from sctrilemma.metrics._context import (
    bras,
    conditional_ilisi,
    depth_r2,
    ilisi,
    log1p_cp10k_pca,
    modality_asw,
    modality_r2,
    pcr_comparison,
)
from sctrilemma.metrics._errors import MetricSkipped

scib_metrics = pytest.importorskip("scib_metrics")


def _typed_donors(donor_shift: float, noise: float = 1.0, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Types A, B, C in three donors of unequal size, plus type "solo" seen in one donor only."""
    rng = np.random.default_rng(seed)
    directions = {t: rng.normal(0, 3, 6) for t in ("A", "B", "C", "solo")}
    donor_offsets = {d: donor_shift * rng.normal(0, 1, 6) for d in ("d1", "d2", "d3")}
    labels, donors = [], []
    for t in ("A", "B", "C"):
        for d, n in (("d1", 20), ("d2", 12), ("d3", 28)):
            labels += [t] * n
            donors += [d] * n
    labels += ["solo"] * 10
    donors += ["d2"] * 10
    labels, donors = np.array(labels), np.array(donors)
    X = np.array([directions[t] + donor_offsets[d] for t, d in zip(labels, donors, strict=True)])
    return X + rng.normal(0, noise, X.shape), labels, donors


def bras_reference(X: np.ndarray, labels: np.ndarray, donors: np.ndarray) -> float:
    """The paper's BRAS written out: a_i same-donor mean, b_i mean over ALL other-donor cells, cosine distance."""
    per_type = []
    for t in np.unique(labels):
        in_type = labels == t
        Xt, dt = X[in_type], donors[in_type]
        if np.unique(dt).size < 2:
            continue
        D = cdist(Xt, Xt, metric="cosine")
        scores = []
        for i in range(Xt.shape[0]):
            same = dt == dt[i]
            same[i] = False
            a, b = D[i, same].mean(), D[i, dt != dt[i]].mean()
            scores.append(1 - abs((b - a) / max(a, b)))
        per_type.append(np.mean(scores))
    return float(np.mean(per_type))


def test_bras_matches_the_paper_definition():
    X, labels, donors = _typed_donors(donor_shift=1.5)
    score = bras(X, labels, donors)
    assert_allclose(score, bras_reference(X, labels, donors), rtol=1e-4)
    assert 0.3 < score < 0.95


def test_bras_mixing_versus_segregation():
    X, labels, donors = _typed_donors(donor_shift=0.0)
    assert bras(X, labels, donors) > 0.85  # finite-sample |s_i| keeps exchangeable donors a little below 1
    X, labels, donors = _typed_donors(donor_shift=3.0, noise=0.05)
    assert bras(X, labels, donors) < 0.2


def test_bras_with_a_single_label_is_allowed():
    X, labels, donors = _typed_donors(donor_shift=1.0)
    keep = labels == "A"
    assert_allclose(
        bras(X[keep], labels[keep], donors[keep]), bras_reference(X[keep], labels[keep], donors[keep]), rtol=1e-4
    )


def test_bras_errors():
    X, labels, donors = _typed_donors(donor_shift=1.0)
    with pytest.raises(MetricSkipped, match="^BRAS cannot be computed: `donors` has 1 distinct donors"):
        bras(X, labels, np.full(labels.size, "d1"))
    with pytest.raises(MetricSkipped, match="^BRAS cannot be computed: no cell type"):
        bras(X, donors, donors)  # every "type" is a single donor
    with pytest.raises(ValueError, match="`donors` has 1 missing values"):
        bras(X, labels, np.where(np.arange(labels.size) == 5, None, donors))


def test_ilisi_segregated_is_zero_mixed_is_high():
    rng = np.random.default_rng(0)
    donors = np.repeat(np.array(["d1", "d2"]), 100)
    segregated = rng.normal(0, 0.5, (200, 3)) + np.where(donors == "d1", 0.0, 20.0)[:, None]
    assert ilisi(segregated, donors) == pytest.approx(0.0, abs=1e-3)
    mixed = rng.normal(0, 1, (200, 3))
    assert ilisi(mixed, donors) > 0.8


def test_ilisi_scales_the_median_lisi_of_an_independent_graph():
    rng = np.random.default_rng(1)
    X = rng.normal(0, 1, (200, 3))
    donors = rng.choice(np.array(["d1", "d2", "d3"]), 200)
    X[donors == "d3"] += 1.0
    distances, indices = NearestNeighbors(n_neighbors=90).fit(X).kneighbors(X)
    graph = scib_metrics.nearest_neighbors.NeighborsResults(indices=indices, distances=distances)
    expected = (np.median(scib_metrics.lisi_knn(graph, donors)) - 1) / 2
    assert 0.2 < expected < 0.95
    assert_allclose(ilisi(X, donors), expected, rtol=1e-5)


def test_ilisi_one_donor():
    with pytest.raises(MetricSkipped, match="^iLISI cannot be computed: `donors` has 1 distinct donors"):
        ilisi(np.random.default_rng(0).normal(size=(100, 3)), np.zeros(100))


def _counts(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """240 cells x 40 genes of Poisson counts with a strong multiplicative donor effect per gene."""
    rng = np.random.default_rng(seed)
    donors = np.repeat(np.array(["d1", "d2", "d3"]), 80)
    donor_factor = {d: rng.lognormal(0, 1.0, 40) for d in np.unique(donors)}
    rates = 3.0 * np.stack([donor_factor[d] for d in donors])
    counts = rng.poisson(rates)
    counts[:, 0] += 1  # no empty cells
    return counts, donors


def pcr_reference(X: np.ndarray, donors: np.ndarray) -> float:
    """Variance-weighted R^2 of each principal component regressed on one-hot donors (with intercept)."""
    pcs = PCA(svd_solver="full").fit(X)
    coords, variance = pcs.transform(X), pcs.explained_variance_
    design = np.column_stack([np.ones(len(donors))] + [(donors == d).astype(float) for d in np.unique(donors)[1:]])
    fitted = design @ np.linalg.lstsq(design, coords, rcond=None)[0]
    r2 = 1 - ((coords - fitted) ** 2).sum(0) / ((coords - coords.mean(0)) ** 2).sum(0)
    return float((r2 * variance).sum() / variance.sum())


def test_log1p_cp10k_pca_matches_a_direct_computation_dense_and_sparse():
    counts, _ = _counts()
    expected = PCA(n_components=5, svd_solver="full").fit_transform(
        np.log1p(counts / counts.sum(1, keepdims=True) * 1e4)
    )
    dense = log1p_cp10k_pca(counts, n_comps=5)
    sparse = log1p_cp10k_pca(sp.csr_matrix(counts), n_comps=5)
    assert dense.shape == (240, 5)
    assert_allclose(np.abs(dense), np.abs(expected), rtol=1e-6, atol=1e-8)  # PCs are defined up to sign
    assert_allclose(np.abs(sparse), np.abs(expected), rtol=1e-6, atol=1e-8)
    assert log1p_cp10k_pca(counts[:, :4]).shape == (240, 3)  # capped at min(n_obs, n_genes) - 1


def test_pcr_comparison_matches_independent_pcr():
    counts, donors = _counts()
    rng = np.random.default_rng(1)
    X_post = rng.normal(0, 1, (240, 8))
    X_post[:, 0] += 2.0 * (donors == "d2")  # some donor signal left
    pre = PCA(n_components=20, svd_solver="full").fit_transform(np.log1p(counts / counts.sum(1, keepdims=True) * 1e4))
    pcr_pre, pcr_post = pcr_reference(pre, donors), pcr_reference(X_post, donors)
    score = pcr_comparison(counts, X_post, donors, n_comps=20)
    assert_allclose(score, (pcr_pre - pcr_post) / pcr_pre, rtol=1e-4)
    assert 0.1 < score < 0.95


def test_pcr_comparison_extremes():
    counts, donors = _counts()
    no_donor_signal = np.random.default_rng(2).normal(0, 1, (240, 8))
    assert pcr_comparison(counts, no_donor_signal, donors) > 0.9
    assert pcr_comparison(counts, log1p_cp10k_pca(counts), donors) == pytest.approx(0.0, abs=1e-4)
    more_donor_signal = np.eye(3)[np.unique(donors, return_inverse=True)[1]] * 10.0 + no_donor_signal[:, :3] * 0.01
    assert pcr_comparison(counts, more_donor_signal, donors) == 0.0  # clipped, as in the paper


def test_pcr_comparison_errors():
    counts, donors = _counts()
    X_post = np.random.default_rng(0).normal(size=(240, 4))
    with pytest.raises(MetricSkipped, match="^PCR comparison cannot be computed: `donors` has 1 distinct donors"):
        pcr_comparison(counts, X_post, np.zeros(240))
    with pytest.raises(ValueError, match="`X_pre` contains negative values"):
        pcr_comparison(counts - 5, X_post, donors)
    with pytest.raises(ValueError, match="`X_pre` contains non-integer values"):
        pcr_comparison(np.log1p(counts), X_post, donors)
    empty = counts.copy()
    empty[7] = 0
    with pytest.raises(ValueError, match="`X_pre` has 1 cells with zero total counts"):
        pcr_comparison(empty, X_post, donors)
    with pytest.raises(ValueError, match=r"`X_pre` has shape \(239, 40\) but `X_post` has 240 rows"):
        pcr_comparison(counts[1:], X_post, donors)
    X_nan = X_post.copy()
    X_nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="`X_post` contains NaN"):
        pcr_comparison(counts, X_nan, donors)


def _modalities(shift: float, noise: float = 1.0, n: int = 40, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Four donor x cell-type strata, ``n`` scRNA and ``n`` snRNA cells each; snRNA is offset by ``shift``."""
    rng = np.random.default_rng(seed)
    modality_offset = rng.normal(0, 1, 5)
    X, modality, strata = [], [], []
    for s in range(4):
        centre = rng.normal(0, 4, 5)
        for m, offset in (("scRNA", 0.0), ("snRNA", shift)):
            X.append(centre + offset * modality_offset + rng.normal(0, noise, (n, 5)))
            modality += [m] * n
            strata += [f"s{s}"] * n
    return np.concatenate(X), np.array(modality), np.array(strata)


def test_modality_r2_segregated_mixed_and_decomposition():
    X, modality, strata = _modalities(shift=6.0, noise=0.05)
    assert modality_r2(X, modality, strata) > 0.95
    X, modality, strata = _modalities(shift=0.0)
    assert modality_r2(X, modality, strata) < 0.1
    X, modality, strata = _modalities(shift=1.0)
    R = X / np.linalg.norm(X, axis=1, keepdims=True)
    expected = []  # R^2 = 1 - SS_within / SS_total, independent of the between-centroid form
    for s in np.unique(strata):
        Rs, ms = R[strata == s], modality[strata == s]
        within = sum(((Rs[ms == m] - Rs[ms == m].mean(0)) ** 2).sum() for m in np.unique(ms))
        expected.append(1 - within / ((Rs - Rs.mean(0)) ** 2).sum())
    assert_allclose(modality_r2(X, modality, strata), np.mean(expected), rtol=1e-10)


def test_modality_asw_matches_sklearn_cosine_silhouette():
    X, modality, strata = _modalities(shift=1.0)
    expected = np.mean(
        [
            np.mean(1 - np.abs(silhouette_samples(X[strata == s], modality[strata == s], metric="cosine")))
            for s in np.unique(strata)
        ]
    )
    score = modality_asw(X, modality, strata)
    assert_allclose(score, expected, rtol=1e-4)
    assert modality_asw(*_modalities(shift=6.0, noise=0.05)) < 0.1


def test_conditional_ilisi_extremes_and_reference():
    assert conditional_ilisi(*_modalities(shift=6.0, noise=0.05)) == pytest.approx(0.0)
    X, modality, strata = _modalities(shift=0.0)
    assert conditional_ilisi(X, modality, strata) > 0.8
    X, modality, strata = _modalities(shift=1.0)
    expected = []
    for s in np.unique(strata):
        Xs, ms = X[strata == s], modality[strata == s] == "scRNA"
        D = cdist(Xs, Xs, metric="cosine")
        np.fill_diagonal(D, np.inf)
        p = ms[np.argsort(D, axis=1)[:, :30]].mean(axis=1)
        expected.append(np.mean(1 / (p**2 + (1 - p) ** 2) - 1))
    assert_allclose(conditional_ilisi(X, modality, strata), np.mean(expected), rtol=1e-10)


@pytest.mark.parametrize(
    ("fn", "name"),
    [(modality_r2, "Modality R\\^2"), (modality_asw, "Modality ASW"), (conditional_ilisi, "Conditional iLISI")],
)
def test_modality_metrics_need_two_modalities(fn, name):
    X, _, strata = _modalities(shift=1.0)
    with pytest.raises(MetricSkipped, match=f"^{name} cannot be computed: `modality` has 1 distinct modality levels"):
        fn(X, np.full(strata.size, "scRNA"), strata)


def _depth(n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.random.Generator]:
    """Log-normal library sizes around 5,000 counts, and the generator for the embeddings built on them."""
    rng = np.random.default_rng(seed)
    return np.round(np.exp(rng.normal(np.log(5000), 0.6, n))) + 1, rng


def depth_r2_reference(X: np.ndarray, library_size: np.ndarray, *, n_splits: int, seed: int) -> float:
    """Least squares with an intercept fitted by numpy on each training fold; R^2 of the pooled held-out predictions."""
    y = np.log(library_size)
    design = np.column_stack([np.ones(len(y)), X])
    predicted = np.empty_like(y)
    for train, test in KFold(n_splits=n_splits, shuffle=True, random_state=seed).split(X):
        coef = np.linalg.lstsq(design[train], y[train], rcond=None)[0]
        predicted[test] = design[test] @ coef
    return 1 - ((y - predicted) ** 2).sum() / ((y - y.mean()) ** 2).sum()


def test_depth_r2_linear_depth_is_near_one_independent_is_near_zero():
    library, rng = _depth()
    encoded = np.column_stack([2 * np.log(library) + 3, rng.normal(size=(library.size, 5))])
    assert depth_r2(encoded + rng.normal(scale=0.01, size=encoded.shape), library) > 0.99
    library, rng = _depth(n=2000, seed=1)
    independent = rng.normal(size=(library.size, 8))
    assert abs(depth_r2(independent, library)) <= 0.05


def test_depth_r2_matches_numpy_least_squares_on_the_same_folds():
    library, rng = _depth(n=300, seed=2)
    X = np.column_stack([np.log(library) + rng.normal(size=library.size), rng.normal(size=(library.size, 4))])
    expected = depth_r2_reference(X, library, n_splits=4, seed=7)
    assert 0.1 < expected < 0.5  # a partial depth signal, so the parity check is not at an extreme
    assert_allclose(depth_r2(X, library, n_splits=4, seed=7), expected, rtol=1e-10)
    # Least squares: any invertible linear map of the embedding gives the same score.
    mixed = X @ rng.normal(size=(5, 5)) * 1e3
    assert_allclose(depth_r2(mixed, library, n_splits=4, seed=7), expected, rtol=1e-8)


def test_depth_r2_errors():
    library, rng = _depth(n=100)
    X = rng.normal(size=(100, 3))
    with pytest.raises(ValueError, match="`library_size` has 1 non-positive values"):
        depth_r2(X, np.r_[library[:-1], 0.0])
    with pytest.raises(ValueError, match="`library_size` has 2 non-positive values"):
        depth_r2(X, np.r_[library[:-2], -1.0, 0.0])
    with pytest.raises(ValueError, match="`library_size` has 99 entries but the embedding has 100 rows"):
        depth_r2(X, library[:-1])
    with pytest.raises(ValueError, match="`library_size` has 1 missing values"):
        depth_r2(X, np.r_[library[:-1], np.nan])
    with pytest.raises(ValueError, match="`library_size` contains infinite values"):
        depth_r2(X, np.r_[library[:-1], np.inf])
    with pytest.raises(ValueError, match="`library_size` must be numeric"):
        depth_r2(X, library.astype(str))
    with pytest.raises(ValueError, match="`n_splits` must be an integer between 2 and n_obs=100; got 1"):
        depth_r2(X, library, n_splits=1)
    with pytest.raises(MetricSkipped, match="Depth R\\^2 cannot be computed: the smallest training fold holds 8 cells"):
        depth_r2(rng.normal(size=(10, 7)), library[:10])  # 8 cells for 7 coefficients and an intercept
    assert np.isfinite(depth_r2(rng.normal(size=(10, 6)), library[:10]))
    with pytest.raises(MetricSkipped, match="same library size"):
        depth_r2(X, np.full(100, 1000))
