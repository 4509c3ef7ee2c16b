from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.cluster import KMeans

import sctrilemma.data._pseudobulk as pseudobulk_module
from sctrilemma.data import PseudobulkCodebook, pseudobulk_profiles

if TYPE_CHECKING:
    import anndata as ad

TOY_COUNTS = np.array(
    [
        [1, 0, 3, 6],
        [0, 5, 0, 0],
        [2, 2, 2, 2],
        [0, 0, 0, 7],
        [4, 1, 0, 5],
        [0, 9, 1, 0],
        [3, 0, 0, 1],
    ],
    dtype=np.int64,
)
TOY_GROUPS = np.array([0, 1, 0, 2, 1, 0, 2])


def _hand_profiles(counts: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    out = np.zeros((n_groups, counts.shape[1]))
    for b in range(n_groups):
        cells = [counts[i] / counts[i].sum() * 1e4 for i in range(len(groups)) if groups[i] == b]
        if cells:
            out[b] = np.log1p(np.mean(cells, axis=0))
    return out


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("row_chunk", [None, 2], ids=["one-chunk", "chunk-2"])
def test_profiles_match_hand_computation(sparse: bool, row_chunk: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if row_chunk is not None:
        monkeypatch.setattr(pseudobulk_module, "ROW_CHUNK", row_chunk)
    matrix = sp.csr_matrix(TOY_COUNTS) if sparse else TOY_COUNTS
    profiles = pseudobulk_profiles(matrix, TOY_GROUPS)
    expected = _hand_profiles(TOY_COUNTS, TOY_GROUPS, 3)
    assert profiles.shape == (3, 4)
    np.testing.assert_allclose(profiles, expected, rtol=1e-12, atol=1e-12)
    # Group 0 by hand, written out: cells 0, 2, 5.
    group0 = np.log1p(
        (np.array([1, 0, 3, 6]) / 10 + np.array([2, 2, 2, 2]) / 8 + np.array([0, 9, 1, 0]) / 10) / 3 * 1e4
    )
    np.testing.assert_allclose(profiles[0], group0, rtol=1e-12)


def test_profiles_empty_group_and_mismatch() -> None:
    profiles = pseudobulk_profiles(TOY_COUNTS, TOY_GROUPS, n_groups=5)
    assert profiles.shape == (5, 4)
    assert (profiles[3:] == 0).all()
    np.testing.assert_allclose(profiles[:3], _hand_profiles(TOY_COUNTS, TOY_GROUPS, 3), rtol=1e-12)
    with pytest.raises(ValueError, match="entries"):
        pseudobulk_profiles(TOY_COUNTS, TOY_GROUPS[:-1])


def test_profiles_on_real_counts(small_adata: ad.AnnData, monkeypatch: pytest.MonkeyPatch) -> None:
    groups = small_adata.obs["donor"].cat.codes.to_numpy()
    dense = small_adata.X.toarray().astype(np.float64)
    cp10k = dense / dense.sum(1, keepdims=True) * 1e4
    expected = np.log1p(np.stack([cp10k[groups == b].mean(0) for b in range(5)]))
    monkeypatch.setattr(pseudobulk_module, "ROW_CHUNK", 150)  # chunks that straddle the donor groups
    np.testing.assert_allclose(pseudobulk_profiles(small_adata.X, groups), expected, rtol=1e-10, atol=1e-12)


def _toy_codebook() -> PseudobulkCodebook:
    centroids = np.array([[0.0, 0.0, 1.0], [2.0, 1.0, 0.0], [1.0, 3.0, 2.0]])
    return PseudobulkCodebook(centroids=centroids, sigma=1.7, temperature=0.5)


def _hand_codes(profiles: np.ndarray, centroids: np.ndarray, sigma: float, temperature: float) -> np.ndarray:
    d = np.linalg.norm(profiles[:, None, :] - centroids[None, :, :], axis=-1)
    logits = -(d / sigma) / temperature
    weights = np.exp(logits)
    return weights / weights.sum(1, keepdims=True)


def test_codes_match_hand_computation() -> None:
    codebook = _toy_codebook()
    profiles = np.array([[0.5, 0.2, 0.9], [2.0, 2.0, 2.0], [-1.0, 0.0, 4.0]])
    codes = codebook.codes(profiles)
    assert codebook.n_codes == 3
    assert codes.shape == (3, 3)
    np.testing.assert_allclose(codes, _hand_codes(profiles, codebook.centroids, 1.7, 0.5), rtol=1e-10)
    np.testing.assert_allclose(codes.sum(1), 1.0, rtol=1e-12)
    # A profile at a centroid puts most weight on it.
    assert codebook.codes(codebook.centroids[1:2]).argmax() == 1


def test_distances_check_gene_count() -> None:
    with pytest.raises(ValueError, match="genes"):
        _toy_codebook().distances(np.zeros((2, 4)))


@pytest.fixture
def reference_profiles() -> np.ndarray:
    rng = np.random.default_rng(0)
    centres = rng.normal(0.0, 3.0, size=(3, 6))
    return np.concatenate([c + rng.normal(0.0, 0.3, size=(4, 6)) for c in centres])


def test_fit_sigma_is_std_of_reference_distances(reference_profiles: np.ndarray) -> None:
    codebook = PseudobulkCodebook.fit(reference_profiles, n_codes=3, temperature=2.0)
    assert codebook.n_codes == 3
    assert codebook.temperature == 2.0
    d = np.linalg.norm(reference_profiles[:, None, :] - codebook.centroids[None, :, :], axis=-1)
    assert d.shape == (12, 3)
    np.testing.assert_allclose(codebook.sigma, d.std(), rtol=1e-10)
    # Not the per-column or per-row std.
    assert not np.isclose(codebook.sigma, d.std(0).mean())
    kmeans = KMeans(n_clusters=3, n_init=5, random_state=42).fit(reference_profiles)
    np.testing.assert_allclose(codebook.centroids, kmeans.cluster_centers_)
    np.testing.assert_allclose(
        codebook.codes(reference_profiles), _hand_codes(reference_profiles, codebook.centroids, d.std(), 2.0), rtol=1e-8
    )


def test_new_group_uses_frozen_centroids(reference_profiles: np.ndarray) -> None:
    codebook = PseudobulkCodebook.fit(reference_profiles, n_codes=3)
    centroids, sigma = codebook.centroids.copy(), codebook.sigma
    new = reference_profiles[:2].mean(0, keepdims=True) + 5.0
    code = codebook.codes(new)
    assert np.array_equal(codebook.centroids, centroids)
    assert codebook.sigma == sigma
    np.testing.assert_allclose(code, _hand_codes(new, centroids, sigma, 1.0), rtol=1e-10)
    # The code of a group does not depend on which other groups are coded with it.
    np.testing.assert_allclose(codebook.codes(np.vstack([reference_profiles, new]))[-1], code[0], rtol=1e-12)
    with pytest.raises(AttributeError):
        codebook.centroids = np.zeros_like(centroids)


def test_fewer_groups_than_codes_is_logged_not_warned(
    reference_profiles: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # expected with few donors: info, not a warning
        with caplog.at_level(logging.INFO, logger="sctrilemma"):
            codebook = PseudobulkCodebook.fit(reference_profiles[:4], n_codes=32)
    assert "Only 4 dataset-donor groups for 32 pseudo-bulk centroids; using M=4" in caplog.text
    assert codebook.n_codes == 4
    assert codebook.codes(reference_profiles[:4]).shape == (4, 4)


def test_single_group_has_a_positive_scale(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="sctrilemma"):
        codebook = PseudobulkCodebook.fit(np.ones((1, 5)), n_codes=32)
    assert "using M=1" in caplog.text
    assert codebook.sigma > 0
    np.testing.assert_allclose(codebook.codes(np.zeros((2, 5))), 1.0)


def test_dict_round_trip(reference_profiles: np.ndarray) -> None:
    codebook = PseudobulkCodebook.fit(reference_profiles, n_codes=3, temperature=0.7)
    state = codebook.to_dict()
    assert set(state) == {"centroids", "sigma", "temperature"}
    restored = PseudobulkCodebook.from_dict(state)
    assert np.array_equal(restored.centroids, codebook.centroids)
    assert restored.sigma == codebook.sigma
    assert restored.temperature == codebook.temperature
    assert np.array_equal(restored.codes(reference_profiles), codebook.codes(reference_profiles))
