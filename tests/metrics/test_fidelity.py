from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.stats import spearmanr

from sctrilemma.metrics._fidelity import (
    contrast_logfc,
    deg_sign_concordance,
    differential_expression_concordance,
    hvg_pearson,
    log1p_cp10k,
    logfc_spearman,
    reconstruction_agreement,
    top_deg_jaccard,
)

N_PLANTED = 20


def _planted(seed: int = 0, n_per_group: int = 60, n_genes: int = 300):
    """Poisson counts with 10 genes up and 10 down (6-fold) in 'disease', at random gene positions."""
    rng = np.random.default_rng(seed)
    base = rng.gamma(2.0, 1.5, size=n_genes) + 1.0
    planted = rng.choice(n_genes, N_PLANTED, replace=False)
    fold = np.ones(n_genes)
    fold[planted[:10]] = 6.0
    fold[planted[10:]] = 1.0 / 6.0
    groups = np.array(["disease"] * n_per_group + ["normal"] * n_per_group)
    means = np.where((groups == "disease")[:, None], base * fold, base)
    counts = rng.poisson(means).astype(np.float64)
    return counts, means, groups, planted


# ----------------------------------------------------------------------------- hand-checkable numbers
def test_log1p_cp10k_by_hand_dense_and_sparse() -> None:
    counts = np.array([[1.0, 3.0], [0.0, 0.0], [2.0, 2.0]])
    expected = np.log1p(np.array([[2500.0, 7500.0], [0.0, 0.0], [5000.0, 5000.0]]))
    np.testing.assert_allclose(log1p_cp10k(counts), expected, rtol=1e-12)
    sparse = log1p_cp10k(sp.csr_matrix(counts))
    assert sp.issparse(sparse)
    np.testing.assert_allclose(sparse.toarray(), expected, rtol=1e-12)
    # An explicit library size replaces the row sums.
    np.testing.assert_allclose(
        log1p_cp10k(counts, library_size=[8.0, 1.0, 8.0])[0], np.log1p([1250.0, 3750.0]), rtol=1e-12
    )


def test_contrast_logfc_by_hand() -> None:
    counts = np.array([[1.0, 3.0, 0.0], [2.0, 2.0, 0.0], [0.0, 1.0, 3.0], [4.0, 0.0, 0.0], [1.0, 1.0, 2.0]])
    groups = np.array(["a", "a", "b", "b", "c"])
    x = np.log1p(counts / counts.sum(1, keepdims=True) * 1e4)
    vs_b = contrast_logfc(counts, groups, "a", "b", min_cells=1)
    np.testing.assert_allclose(vs_b, x[:2].mean(0) - x[2:4].mean(0), rtol=1e-12)
    vs_rest = contrast_logfc(counts, groups, "a", min_cells=1)
    np.testing.assert_allclose(vs_rest, x[:2].mean(0) - x[2:].mean(0), rtol=1e-12)
    # gene 0 by hand, written out: a = mean(log1p(2500), log1p(5000)), b = mean(0, log1p(10000))
    assert vs_b[0] == pytest.approx((np.log1p(2500) + np.log1p(5000)) / 2 - np.log1p(10000) / 2)
    np.testing.assert_allclose(contrast_logfc(x, groups, "a", "b", normalize=False, min_cells=1), vs_b, rtol=1e-12)


def test_logfc_vector_metrics_by_hand() -> None:
    observed = np.array([3.0, -2.0, 0.5, 0.1, -0.05, 1.0])
    assert logfc_spearman(observed, observed) == pytest.approx(1.0)
    assert logfc_spearman(observed, -observed) == pytest.approx(-1.0)
    assert logfc_spearman(observed, 2 * observed + 1) == pytest.approx(1.0)
    assert logfc_spearman(observed, np.exp(observed)) == pytest.approx(1.0)  # rank-based, not linear
    # top-2 by |logFC|: observed {0, 1}; reconstructed {0, 2} -> 1 / 3.
    reconstructed = np.array([3.0, 0.1, -2.5, 0.0, 0.0, 0.0])
    assert top_deg_jaccard(observed, reconstructed, n_top=2) == pytest.approx(1 / 3)
    # sign on observed top-3 {0, 1, 5}: + agrees, - vs + disagrees, + vs 0 disagrees -> 1 / 3.
    assert deg_sign_concordance(observed, reconstructed, n_top=3) == pytest.approx(1 / 3)
    assert deg_sign_concordance(observed, -observed, n_top=3) == 0.0
    assert top_deg_jaccard(observed, -observed, n_top=3) == 1.0
    assert np.isnan(logfc_spearman(observed, np.zeros_like(observed)))


def test_reconstruction_agreement_by_hand() -> None:
    observed = np.array([[0.0, 1.0, 2.0, 3.0], [3.0, 4.0, 5.0, 9.0]])
    reconstructed = observed + np.array([[1.0, -1.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]])
    scores = reconstruction_agreement(observed, reconstructed, normalize=False, min_detection=0.0)
    assert scores["mae"] == pytest.approx(4 / 8)
    assert scores["mse"] == pytest.approx(6 / 8)
    pearson = np.mean([np.corrcoef(observed[i], reconstructed[i])[0, 1] for i in range(2)])
    spearman = np.mean([spearmanr(observed[i], reconstructed[i]).statistic for i in range(2)])
    assert scores["pearson"] == pytest.approx(pearson)
    assert scores["spearman"] == pytest.approx(spearman)
    assert (scores["n_genes"], scores["n_cells"]) == (4, 2)


def test_cellwise_spearman_matches_scipy_with_ties() -> None:
    rng = np.random.default_rng(3)
    observed = rng.poisson(1.0, size=(30, 25)).astype(float)  # many ties
    reconstructed = observed + rng.normal(0, 0.8, size=observed.shape) ** 2
    scores = reconstruction_agreement(observed, reconstructed, min_detection=0.0)
    x, y = log1p_cp10k(observed), log1p_cp10k(reconstructed)
    rows = [i for i in range(30) if x[i].std() > 0]
    reference = np.mean([spearmanr(x[i], y[i]).statistic for i in rows])
    assert scores["spearman"] == pytest.approx(reference, rel=1e-10)
    assert scores["mse"] == pytest.approx(np.mean((x - y) ** 2), rel=1e-10)


# ----------------------------------------------------------------------------- identical / reversed / planted
def test_identical_and_rescaled_reconstruction_is_perfect() -> None:
    counts, _, groups, _ = _planted()
    for reconstructed in (counts, 7.3 * counts):  # independent normalisation removes output scale
        de = differential_expression_concordance(counts, reconstructed, groups, "disease", "normal")
        assert de["logfc_spearman"] == pytest.approx(1.0)
        assert de["deg_jaccard"] == 1.0
        assert de["deg_sign_concordance"] == 1.0
        agreement = reconstruction_agreement(counts, reconstructed)
        assert agreement["pearson"] == pytest.approx(1.0)
        assert agreement["spearman"] == pytest.approx(1.0)
        assert agreement["mae"] == pytest.approx(0.0, abs=1e-12)
        assert agreement["mse"] == pytest.approx(0.0, abs=1e-12)
    assert hvg_pearson(counts, counts, n_top_genes=50) == pytest.approx(1.0)


def test_swapped_groups_reverse_the_contrast() -> None:
    counts, _, groups, _ = _planted()
    disease, normal = groups == "disease", groups == "normal"
    swapped = counts.copy()
    swapped[disease], swapped[normal] = counts[normal], counts[disease]
    de = differential_expression_concordance(counts, swapped, groups, "disease", "normal")
    assert de["logfc_spearman"] == pytest.approx(-1.0)
    assert de["deg_sign_concordance"] == 0.0
    assert de["deg_jaccard"] == 1.0  # same genes, opposite direction


def test_negated_profiles_give_minus_one() -> None:
    rng = np.random.default_rng(1)
    x = log1p_cp10k(rng.poisson(2.0, size=(20, 30)).astype(float))
    scores = reconstruction_agreement(x, -x, normalize=False, min_detection=0.0)
    assert scores["pearson"] == pytest.approx(-1.0)
    assert scores["spearman"] == pytest.approx(-1.0)


def test_planted_degs_are_recovered() -> None:
    counts, means, groups, planted = _planted()
    observed_logfc = contrast_logfc(counts, groups, "disease", "normal")
    top = np.argsort(-np.abs(observed_logfc))[:N_PLANTED]
    assert set(top.tolist()) == set(planted.tolist())
    faithful = differential_expression_concordance(counts, means, groups, "disease", "normal", n_top=N_PLANTED)
    assert faithful["deg_jaccard"] == 1.0
    assert faithful["deg_sign_concordance"] == 1.0
    # A reconstruction without the disease effect recovers almost none of the planted genes.
    rng = np.random.default_rng(7)
    null = rng.poisson(np.broadcast_to(means[groups == "normal"][0], counts.shape)).astype(float)
    blind = differential_expression_concordance(counts, null, groups, "disease", "normal", n_top=N_PLANTED)
    assert blind["deg_jaccard"] < 0.3
    assert blind["deg_sign_concordance"] < 0.8
    # logFC Spearman ranks all 300 genes, most of them pure noise: lower, but still above the blind one.
    assert faithful["logfc_spearman"] > blind["logfc_spearman"] + 0.1


def test_detection_filter_uses_summed_group_rates() -> None:
    counts, _, groups, _ = _planted(n_genes=150)
    counts[:, :3] = 0.0
    counts[0, 0] = 5.0  # d = 1/60 < 0.02 -> dropped
    counts[:2, 1] = 5.0  # d = 2/60 > 0.02 -> kept
    de = differential_expression_concordance(counts, counts, groups, "disease", "normal", n_top=20)
    assert de["n_genes"] == 148
    # Direct agreement keeps genes detected in >= 2 % of all 120 cells: 1/120 and 2/120 are both dropped.
    assert reconstruction_agreement(counts, counts)["n_genes"] == 147


def test_detection_thresholds_at_the_boundary() -> None:
    counts, _, groups, _ = _planted(n_per_group=50, n_genes=150)
    counts[:, 0] = 0.0
    counts[0, 0] = 5.0  # d = 1/50 = 0.02 exactly: the contrast filter is strict (d > 0.02) -> dropped
    counts[:, 1] = 0.0
    counts[:2, 1] = 5.0  # detected in 2/100 = 2 % of all cells: the agreement filter is inclusive -> kept
    de = differential_expression_concordance(counts, counts, groups, "disease", "normal", n_top=20)
    assert de["n_genes"] == 149
    assert reconstruction_agreement(counts, counts)["n_genes"] == 149  # gene 0 (1 %) dropped, gene 1 kept


def test_sparse_input_matches_dense() -> None:
    counts, means, groups, _ = _planted(seed=2)
    dense = differential_expression_concordance(counts, means, groups, "disease", n_top=20)
    sparse = differential_expression_concordance(sp.csr_matrix(counts), means, groups, "disease", n_top=20)
    assert dense == pytest.approx(sparse)
    assert reconstruction_agreement(counts, means, chunk_size=7) == pytest.approx(
        reconstruction_agreement(sp.csr_matrix(counts), means)
    )
    assert hvg_pearson(counts, means, n_top_genes=40) == pytest.approx(
        hvg_pearson(sp.csr_matrix(counts), means, n_top_genes=40, chunk_size=11)
    )


def test_hvg_pearson_selects_high_variance_genes() -> None:
    rng = np.random.default_rng(4)
    counts = rng.poisson(1.0, size=(50, 40)).astype(float)
    counts[:, :5] = rng.poisson(rng.uniform(5, 60, size=(50, 1)), size=(50, 5))  # five high-variance genes
    reconstructed = rng.uniform(0, 1, size=counts.shape)
    reconstructed[:, :5] = counts[:, :5]  # exact on the high-variance genes only
    assert hvg_pearson(counts, reconstructed, n_top_genes=5) == pytest.approx(1.0)
    everything = hvg_pearson(counts, reconstructed, n_top_genes=40)
    assert everything < 0.99
    manual = np.mean([np.corrcoef(counts[i], reconstructed[i])[0, 1] for i in range(50)])
    assert everything == pytest.approx(manual)


def test_metrics_are_deterministic() -> None:
    counts, means, groups, _ = _planted(seed=5)
    first = differential_expression_concordance(counts, means, groups, "disease", n_top=20)
    assert first == differential_expression_concordance(counts, means, groups, "disease", n_top=20)


# ----------------------------------------------------------------------------- bad input
@pytest.fixture
def toy() -> tuple[np.ndarray, np.ndarray]:
    counts, _, groups, _ = _planted(n_genes=150)
    return counts, groups


def test_shape_mismatch_raises(toy) -> None:
    counts, groups = toy
    with pytest.raises(ValueError, match="align both to the same cells"):
        differential_expression_concordance(counts, counts[:, :-1], groups, "disease")
    with pytest.raises(ValueError, match="align both to the same cells"):
        reconstruction_agreement(counts, counts[:-1])
    with pytest.raises(ValueError, match="compute both over the same genes"):
        logfc_spearman(np.ones(3), np.ones(4))


def test_nan_and_negative_raise(toy) -> None:
    counts, groups = toy
    bad = counts.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="`reconstructed` contains NaN"):
        differential_expression_concordance(counts, bad, groups, "disease")
    with pytest.raises(ValueError, match="`observed` contains NaN"):
        hvg_pearson(bad, counts)
    with pytest.raises(ValueError, match="contains negative values.*normalize=False"):
        reconstruction_agreement(counts, -counts)
    with pytest.raises(ValueError, match="`observed_logfc` contains NaN"):
        top_deg_jaccard(np.array([np.nan, 1.0, 2.0]), np.ones(3), n_top=1)


def test_bad_groups_raise(toy) -> None:
    counts, groups = toy
    with pytest.raises(ValueError, match="single class"):
        differential_expression_concordance(counts, counts, np.full(len(groups), "normal"), "normal")
    with pytest.raises(ValueError, match="fewer than `min_cells=40`"):
        differential_expression_concordance(counts[:70], counts[:70], groups[:70], "disease", "normal")
    with pytest.raises(ValueError, match="one label per row"):
        contrast_logfc(counts, groups[:-1], "disease")
    with pytest.raises(ValueError, match="`group='flu'` is not among"):
        contrast_logfc(counts, groups, "flu")
    with pytest.raises(ValueError, match="`reference='flu'` is not among"):
        contrast_logfc(counts, groups, "disease", "flu")
    with pytest.raises(ValueError, match="`reference` equals `group`"):
        contrast_logfc(counts, groups, "disease", "disease")
    labelled = groups.astype(object)
    labelled[3] = None
    with pytest.raises(ValueError, match="missing labels"):
        contrast_logfc(counts, labelled, "disease")


def test_too_few_genes_and_bad_parameters_raise(toy) -> None:
    counts, groups = toy
    with pytest.raises(ValueError, match="not more than `n_top=100`"):
        differential_expression_concordance(counts[:, :80], counts[:, :80], groups, "disease")
    with pytest.raises(ValueError, match="top sets would be every gene"):
        top_deg_jaccard(np.arange(5.0), np.arange(5.0), n_top=5)
    with pytest.raises(ValueError, match="`min_detection=1.5` must lie in"):
        reconstruction_agreement(counts, counts, min_detection=1.5)
    with pytest.raises(ValueError, match="`n_top_genes=1`"):
        hvg_pearson(counts, counts, n_top_genes=1)
