from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score, silhouette_samples, silhouette_score
from sklearn.neighbors import NearestNeighbors

from sctrilemma.metrics._context import log1p_cp10k_pca
from sctrilemma.metrics._errors import MetricSkipped
from sctrilemma.metrics._identity import asw_label, clisi, exact_neighbors, isolated_labels, nmi_ari_kmeans
from sctrilemma.metrics._sampling import stratified_subsample

scib_metrics = pytest.importorskip("scib_metrics")

N_PER_TYPE = 60


def _blobs(spread: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three cell types of 60 cells in 4-D; ``spread`` is the noise s.d. around centres 6 apart."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.array(["B", "T", "NK"]), N_PER_TYPE)
    centres = {"B": [6.0, 0, 0, 0], "T": [0, 6.0, 0, 0], "NK": [0, 0, 6.0, 0]}
    X = np.array([centres[c] for c in labels]) + rng.normal(0, spread, (labels.size, 4))
    return X, labels


def lisi_reference(X: np.ndarray, labels: np.ndarray, n_neighbors: int = 90, tol: float = 1e-5) -> np.ndarray:
    """Harmony's compute_simpson in plain numpy: per-cell inverse Simpson index at perplexity n_neighbors // 3."""
    distances, indices = NearestNeighbors(n_neighbors=n_neighbors - 1).fit(X).kneighbors()
    log_u = np.log(n_neighbors // 3)
    out = np.empty(X.shape[0])
    for i in range(X.shape[0]):
        d, lab = distances[i], labels[indices[i]]

        def h_beta(beta, d=d):
            p = np.exp(-d * beta)
            total = p.sum()
            return np.log(total) + beta * (d * p).sum() / total, p / total

        beta, lo, hi = 1.0, -np.inf, np.inf
        h, p = h_beta(beta)
        tries = 0
        while abs(h - log_u) >= tol and tries < 50:
            if h - log_u > 0:
                lo, beta = beta, beta * 2 if hi == np.inf else (beta + hi) / 2
            else:
                hi, beta = beta, beta / 2 if lo == -np.inf else (beta + lo) / 2
            h, p = h_beta(beta)
            tries += 1
        out[i] = 1 / sum(p[lab == c].sum() ** 2 for c in np.unique(lab))
    return out


def test_exact_neighbors_lists_self_first_then_nearest():
    X, _ = _blobs(1.0)
    result = exact_neighbors(X, 10)
    assert result.indices.shape == result.distances.shape == (X.shape[0], 10)
    assert np.array_equal(result.indices[:, 0], np.arange(X.shape[0]))
    assert_allclose(result.distances[:, 0], 0.0)
    ref_dist, ref_idx = NearestNeighbors(n_neighbors=10).fit(X).kneighbors(X)
    assert_allclose(result.distances, ref_dist, atol=1e-12)
    assert np.array_equal(result.indices[:, 1:], ref_idx[:, 1:])


def test_nmi_ari_perfect_separation():
    X, labels = _blobs(0.3)
    scores = nmi_ari_kmeans(X, labels, n_init=3)
    assert scores["nmi"] == pytest.approx(1.0)
    assert scores["ari"] == pytest.approx(1.0)


def test_nmi_ari_random_embedding_scores_low():
    X, labels = _blobs(1.0)
    scores = nmi_ari_kmeans(np.random.default_rng(1).normal(size=X.shape), labels, n_init=3)
    assert scores["nmi"] < 0.1
    assert scores["ari"] < 0.1


def test_nmi_ari_matches_scib_when_the_partition_is_unique():
    X, labels = _blobs(0.3)
    labels = labels.copy()
    labels[:12] = "T"  # 12 mislabelled B cells: k-means still finds the geometric blobs, so NMI/ARI < 1
    ours = nmi_ari_kmeans(X, labels, n_init=3)
    reference = scib_metrics.nmi_ari_cluster_labels_kmeans(X, labels)
    assert ours["nmi"] < 0.95
    assert_allclose([ours["nmi"], ours["ari"]], [reference["nmi"], reference["ari"]], rtol=1e-6)


def test_nmi_ari_is_the_mean_over_seeded_initialisations():
    X, labels = _blobs(3.5)  # overlapping: different initialisations reach different partitions
    ours = nmi_ari_kmeans(X, labels, n_init=5, seed=7)
    runs = [KMeans(3, n_init=1, random_state=7 + r).fit_predict(X) for r in range(5)]
    nmi = [normalized_mutual_info_score(labels, p) for p in runs]
    ari = [adjusted_rand_score(labels, p) for p in runs]
    assert_allclose([ours["nmi"], ours["ari"]], [np.mean(nmi), np.mean(ari)], rtol=1e-12)
    assert ours == nmi_ari_kmeans(X, labels, n_init=5, seed=7)


def test_asw_label_matches_sklearn_and_orders_embeddings():
    X, labels = _blobs(1.0)
    score = asw_label(X, labels)
    assert_allclose(score, (1 + silhouette_score(X, labels)) / 2, rtol=1e-5)
    assert score > 0.8
    assert asw_label(np.random.default_rng(2).normal(size=X.shape), labels) < 0.55


def test_clisi_is_one_for_separated_types_and_matches_reference_lisi():
    X, labels = _blobs(0.5)
    assert clisi(X, labels) == pytest.approx(1.0, abs=1e-3)
    X_mixed = np.random.default_rng(3).normal(size=X.shape)
    score = clisi(X_mixed, labels)
    expected = (3 - np.median(lisi_reference(X_mixed, labels))) / 2
    assert score < 0.5
    assert_allclose(score, expected, rtol=1e-3)


def test_isolated_labels_averages_the_least_shared_types():
    X, labels = _blobs(1.0)
    X[labels == "NK"] = np.random.default_rng(4).normal(0, 3.0, (N_PER_TYPE, 4))  # NK: scattered, poor silhouette
    donors = np.tile(np.array(["d1", "d2", "d3"]), labels.size // 3)
    donors[labels == "NK"] = "d1"  # NK occurs in one donor, B and T in three: NK alone is isolated
    score = isolated_labels(X, labels, donors)
    s = silhouette_samples(X, labels)
    assert_allclose(score, np.mean((1 + s[labels == "NK"]) / 2), rtol=1e-5)
    assert score < asw_label(X, labels) - 0.1
    # With one donor every type is isolated: the macro average over types equals the plain mean here.
    one_donor = isolated_labels(X, labels, np.zeros(labels.size))
    assert_allclose(one_donor, np.mean([np.mean((1 + s[labels == c]) / 2) for c in np.unique(labels)]), rtol=1e-5)


def test_isolated_labels_matches_scib_on_real_pbmcs(example_adata):
    """Kang 2018 PBMCs (4 types in all 5 donors): parity with scib-metrics with and without a truly isolated type."""
    keep = np.sort(np.random.default_rng(0).choice(example_adata.n_obs, 1000, replace=False))
    adata = example_adata[keep]
    X = log1p_cp10k_pca(adata.X, n_comps=30).astype(np.float32)
    labels = adata.obs["cell_type"].astype(str).to_numpy()
    donors = adata.obs["donor"].astype(str).to_numpy()

    # Every type in every donor: all types are isolated, so the score is label ASW averaged per type.
    assert_allclose(isolated_labels(X, labels, donors), scib_metrics.isolated_labels(X, labels, donors), rtol=1e-6)
    balanced = stratified_subsample(labels, max_per_label=50, seed=0)
    assert np.unique(labels[balanced], return_counts=True)[1].tolist() == [50] * 4
    assert_allclose(
        isolated_labels(X[balanced], labels[balanced], donors[balanced]),
        asw_label(X[balanced], labels[balanced]),
        rtol=1e-5,
    )

    # Monocytes kept in one donor only: they alone are isolated and the metric departs from label ASW.
    iso = (labels != "CD14+ Monocytes") | (donors == "1015")
    X_iso, labels_iso, donors_iso = X[iso], labels[iso], donors[iso]
    score = isolated_labels(X_iso, labels_iso, donors_iso)
    assert_allclose(score, scib_metrics.isolated_labels(X_iso, labels_iso, donors_iso), rtol=1e-6)
    s = silhouette_samples(X_iso, labels_iso)
    assert_allclose(score, np.mean((1 + s[labels_iso == "CD14+ Monocytes"]) / 2), rtol=1e-4)
    assert abs(score - asw_label(X_iso, labels_iso)) > 0.05


@pytest.mark.parametrize(
    ("fn", "name"),
    [
        (lambda X, y: nmi_ari_kmeans(X, y, n_init=1), "k-means NMI/ARI"),
        (asw_label, "ASW-label"),
        (clisi, "cLISI"),
        (lambda X, y: isolated_labels(X, y, np.arange(y.size) % 2), "Isolated-label silhouette"),
    ],
)
def test_one_cell_type_cannot_be_scored(fn, name):
    X, _ = _blobs(1.0)
    with pytest.raises(MetricSkipped, match=f"^{name} cannot be computed: `labels` has 1 distinct cell types"):
        fn(X, np.full(X.shape[0], "B"))


def test_bad_inputs_are_rejected():
    X, labels = _blobs(1.0)
    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    with pytest.raises(ValueError, match="`X` contains NaN or infinite values in 1 rows"):
        asw_label(X_nan, labels)
    with pytest.raises(ValueError, match="`labels` has 179 entries but the embedding has 180 rows"):
        nmi_ari_kmeans(X, labels[:-1])
    with pytest.raises(ValueError, match="`n_neighbors=500` must be between 2 and the number of cells"):
        clisi(X, labels, n_neighbors=500)
    with pytest.raises(ValueError, match="`X` must be 2-D"):
        asw_label(X[:, 0], labels)
