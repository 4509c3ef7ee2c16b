from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.metrics import adjusted_rand_score

from sctrilemma.metrics._interventions import (
    centroid_shrinkage,
    donor_centering,
    kmeans_labels,
    latent_refinement,
)


def _latent(seed: int = 0, shape: tuple[int, ...] = (30, 4)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.array(["b", "a", "c"]), shape[0] // 3)
    offsets = {"a": 0.0, "b": 3.0, "c": -2.0}
    latent = rng.normal(size=shape) + np.array([offsets[x] for x in labels]).reshape(-1, *[1] * (len(shape) - 1))
    return latent.astype(np.float32), labels


def _group_mean(latent: np.ndarray, labels: np.ndarray, label: str) -> np.ndarray:
    return latent[labels == label].astype(np.float64).mean(axis=0)


# ----------------------------------------------------------------------------- centroid shrinkage
@pytest.mark.parametrize("shape", [(30, 4), (30, 3, 4)], ids=["embedding", "tokens"])
def test_centroid_shrinkage_alpha_endpoints_and_midpoint(shape: tuple[int, ...]) -> None:
    latent, labels = _latent(shape=shape)
    unchanged = centroid_shrinkage(latent, labels, alpha=0.0)
    np.testing.assert_array_equal(unchanged, latent)
    assert unchanged.dtype == latent.dtype
    assert unchanged is not latent
    collapsed = centroid_shrinkage(latent, labels, alpha=1.0)
    for label in ("a", "b", "c"):
        centroid = _group_mean(latent, labels, label)
        np.testing.assert_allclose(
            collapsed[labels == label],
            np.broadcast_to(centroid, collapsed[labels == label].shape),
            rtol=1e-5,
            atol=1e-6,
        )
    half = centroid_shrinkage(latent, labels, alpha=0.5)
    np.testing.assert_allclose(half, 0.5 * latent + 0.5 * collapsed, rtol=1e-5, atol=1e-6)
    # Centroids themselves do not move.
    for label in ("a", "b", "c"):
        np.testing.assert_allclose(_group_mean(half, labels, label), _group_mean(latent, labels, label), atol=1e-5)


def test_kmeans_labels_recover_separated_clusters_and_are_deterministic() -> None:
    latent, labels = _latent()
    latent[labels == "b"] += 20.0  # unmistakable clusters
    latent[labels == "c"] -= 20.0
    clusters = kmeans_labels(latent, 3, random_state=0)
    assert adjusted_rand_score(labels, clusters) == 1.0
    np.testing.assert_array_equal(clusters, kmeans_labels(latent, 3, random_state=0))
    shrunk = centroid_shrinkage(latent, clusters, alpha=1.0)
    assert len(np.unique(shrunk.round(4), axis=0)) == 3
    with pytest.raises(ValueError, match="`n_clusters=1` must lie between 2"):
        kmeans_labels(latent, 1)


# ----------------------------------------------------------------------------- donor centering
@pytest.mark.parametrize("shape", [(30, 4), (30, 3, 4)], ids=["embedding", "tokens"])
def test_donor_centering_alpha_endpoints(shape: tuple[int, ...]) -> None:
    latent, donors = _latent(seed=1, shape=shape)
    np.testing.assert_array_equal(donor_centering(latent, donors, alpha=0.0), latent)
    centred = donor_centering(latent, donors, alpha=1.0)
    overall = latent.astype(np.float64).mean(axis=0)
    for donor in ("a", "b", "c"):
        assert not np.allclose(_group_mean(latent, donors, donor), overall, atol=0.5)  # they differed before
        np.testing.assert_allclose(_group_mean(centred, donors, donor), overall, atol=1e-5)
    # Within-donor structure is untouched: cells keep their offsets from their donor mean.
    first = donors == "a"
    np.testing.assert_allclose(
        centred[first] - centred[first].mean(axis=0), latent[first] - latent[first].mean(axis=0), atol=1e-5
    )


def test_donor_centering_by_hand_and_mean_preserved() -> None:
    latent = np.array([[0.0, 0.0], [2.0, 2.0], [10.0, 4.0]])
    donors = ["x", "x", "y"]
    # mu = (4, 2); offsets: x -> (1, 1) - (4, 2) = (-3, -1); y -> (10, 4) - (4, 2) = (6, 2)
    out = donor_centering(latent, donors, alpha=0.5)
    np.testing.assert_allclose(out, [[1.5, 0.5], [3.5, 2.5], [7.0, 3.0]])
    np.testing.assert_allclose(out.mean(axis=0), latent.mean(axis=0))


# ----------------------------------------------------------------------------- latent refinement
def _decoder_problem(n_cells: int = 24, n_latent: int = 3, n_genes: int = 15):
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(n_latent, n_genes, generator=generator)
    decoder = torch.nn.Linear(n_latent, n_genes, bias=False)
    with torch.no_grad():
        decoder.weight.copy_(weight.T)

    def decode(z: torch.Tensor) -> torch.Tensor:
        return torch.exp(decoder(z))

    rng = np.random.default_rng(0)
    truth = rng.normal(size=(n_cells, n_latent)).astype(np.float32)
    with torch.no_grad():
        counts = decode(torch.from_numpy(truth)).numpy() * 50.0
    start = truth + rng.normal(scale=0.8, size=truth.shape).astype(np.float32)
    return decode, decoder, counts, start


def _cell_pearson(decode, latent: np.ndarray, counts: np.ndarray) -> float:
    with torch.no_grad():
        mean = decode(torch.from_numpy(latent)).numpy()
    x = np.log1p(counts / counts.sum(1, keepdims=True) * 1e4)
    y = np.log1p(mean / mean.sum(1, keepdims=True) * 1e4)
    return float(np.mean([np.corrcoef(x[i], y[i])[0, 1] for i in range(len(x))]))


def test_latent_refinement_improves_fidelity_and_interpolates() -> None:
    decode, module, counts, start = _decoder_problem()

    def must_not_run(z: torch.Tensor) -> torch.Tensor:
        raise AssertionError("alpha=0 must not decode")

    np.testing.assert_array_equal(latent_refinement(start, counts, must_not_run, alpha=0.0), start)
    full = latent_refinement(start, counts, decode, alpha=1.0, n_steps=30, lr_scale=0.05)
    assert full.shape == start.shape
    assert full.dtype == np.float32
    assert _cell_pearson(decode, full, counts) > _cell_pearson(decode, start, counts) + 0.01
    half = latent_refinement(start, counts, decode, alpha=0.5, n_steps=30, lr_scale=0.05)
    np.testing.assert_allclose(half, start + 0.5 * (full - start), rtol=1e-5, atol=1e-6)
    # Deterministic, per cell (batching does not matter), sparse counts accepted, decoder weights untouched.
    again = latent_refinement(start, sp.csr_matrix(counts), decode, alpha=1.0, n_steps=30, lr_scale=0.05, batch_size=5)
    np.testing.assert_allclose(again, full, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(latent_refinement(start, counts, decode, alpha=1.0, n_steps=30, lr_scale=0.05), full)
    assert module.weight.grad is None


def test_latent_refinement_bad_input_raises() -> None:
    decode, _, counts, start = _decoder_problem()
    with pytest.raises(ValueError, match="`counts` has shape"):
        latent_refinement(start, counts[:-1], decode, alpha=0.5)
    with pytest.raises(ValueError, match="`decoder` returned shape"):
        latent_refinement(start, counts[:, :-1], decode, alpha=0.5)
    with pytest.raises(ValueError, match="finite and non-negative"):
        latent_refinement(start, -counts, decode, alpha=0.5)
    with pytest.raises(ValueError, match="`n_steps=0`"):
        latent_refinement(start, counts, decode, alpha=0.5, n_steps=0)


# ----------------------------------------------------------------------------- shared validation
@pytest.mark.parametrize("intervention", [centroid_shrinkage, donor_centering])
def test_group_interventions_validate(intervention) -> None:
    latent, labels = _latent()
    with pytest.raises(ValueError, match=r"`alpha=1.5` must lie in \[0, 1\]"):
        intervention(latent, labels, alpha=1.5)
    with pytest.raises(ValueError, match="labels for 30 cells"):
        intervention(latent, labels[:-1], alpha=0.5)
    with pytest.raises(ValueError, match="single class"):
        intervention(latent, np.full(30, "a"), alpha=0.5)
    missing = labels.astype(object)
    missing[0] = None
    with pytest.raises(ValueError, match="missing labels"):
        intervention(latent, missing, alpha=0.5)
    bad = latent.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="`latent` contains NaN"):
        intervention(bad, labels, alpha=0.5)
    with pytest.raises(ValueError, match=r"shape \(n_cells, ...\)"):
        intervention(latent[:, 0], labels, alpha=0.5)
