"""Label transfer from a labelled reference to query cells, with an unknown class."""

from __future__ import annotations

import numpy as np
import pytest

from sctrilemma import SCTrilemma
from sctrilemma.data import example_reference_dir, load_example
from sctrilemma.data._example import HELD_OUT_DONORS, REFERENCE_DONORS
from sctrilemma.model import transfer_labels


def _blobs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three well-separated Gaussian clusters of 100 points in 5 dimensions, labelled a, b, c."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0] * 5, [10.0] + [0.0] * 4, [0.0, 10.0, 0.0, 0.0, 0.0]])
    points = np.concatenate([centre + rng.normal(size=(100, 5)) for centre in centres])
    return points, np.repeat(["a", "b", "c"], 100)


def test_known_cells_get_their_cluster_and_far_cells_are_unknown() -> None:
    reference, labels = _blobs(0)
    query, truth = _blobs(1)
    far = np.random.default_rng(2).normal(size=(20, 5)) + np.array([0.0, 0.0, 30.0, 0.0, 0.0])
    result = transfer_labels(reference, labels, np.concatenate([query, far]))
    assert (result["nearest_label"].to_numpy()[:300] == truth).all()
    # a few known cells lie beyond the 99th percentile of their cluster's own distances (100 points per cluster)
    assert result["is_unknown"].to_numpy()[:300].mean() < 0.1
    assert result["is_unknown"].to_numpy()[300:].all()  # their neighbours agree, but they lie far away
    assert (result["uncertainty"].to_numpy()[300:] < 0.5).all()
    assert (result["distance_ratio"].to_numpy()[300:] > 1).all()
    assert set(result["prediction"].cat.categories) == {"a", "b", "c", "unknown"}


def test_a_split_vote_is_unknown_and_the_rules_can_be_switched_off() -> None:
    reference, labels = _blobs(0)
    labels = labels.copy()
    labels = labels.astype(object)
    labels[:100] = np.array(["a", "a2", "a3"])[np.arange(100) % 3]  # cluster a carries three labels, mixed
    query, _ = _blobs(1)
    result = transfer_labels(reference, labels, query[:100], novelty_quantile=None)
    assert result["is_unknown"].mean() > 0.5
    kept = transfer_labels(reference, labels, query[:100], max_uncertainty=1.0, novelty_quantile=None)
    assert not kept["is_unknown"].any()
    assert set(kept["prediction"]) <= {"a", "a2", "a3"}


def test_missing_reference_labels_are_not_used_and_bad_input_is_refused() -> None:
    reference, labels = _blobs(0)
    labels = labels.astype(object)
    labels[:100] = None  # cluster a unlabelled: its query cells must not be called "a" or "None"
    result = transfer_labels(reference, labels, _blobs(1)[0][:100])
    assert "a" not in set(result["prediction"])
    assert "None" not in set(result["prediction"])
    with pytest.raises(ValueError, match="same number of features"):
        transfer_labels(reference, labels, reference[:, :3])
    with pytest.raises(ValueError, match="reference labels for"):
        transfer_labels(reference, labels[:10], reference)
    with pytest.raises(ValueError, match="n_neighbors"):
        transfer_labels(reference[:10], labels[:10], reference, n_neighbors=15)


def test_held_out_donors_get_the_reference_labels_and_a_removed_type_is_unknown() -> None:
    """Kang 2018 PBMCs: reference donors labelled, held-out donors as the query, embedded by the shipped reference."""
    adata = load_example()
    reference = adata[adata.obs["donor"].isin(REFERENCE_DONORS)].copy()
    query = adata[adata.obs["donor"].isin(HELD_OUT_DONORS)].copy()
    truth = query.obs["cell_type"].astype(str).to_numpy()
    reference_model = SCTrilemma.load_query_data(reference, example_reference_dir())
    reference.obsm["X_sctrilemma"] = reference_model.get_latent_representation()
    model = SCTrilemma.load_query_data(query, example_reference_dir())

    result = model.transfer_labels(reference, "cell_type")
    assert result.index.equals(query.obs_names)
    accuracy = (result["prediction"].astype(str).to_numpy() == truth).mean()
    print(f"accuracy {accuracy:.3f}, unknown {result['is_unknown'].mean():.3f}")
    assert accuracy > 0.95  # 0.991 with the committed reference
    assert result["is_unknown"].mean() < 0.05

    without_nk = reference[reference.obs["cell_type"] != "NK cells"].copy()
    result = model.transfer_labels(without_nk, "cell_type")
    nk = truth == "NK cells"
    print(f"unknown: NK {result['is_unknown'][nk].mean():.3f}, others {result['is_unknown'][~nk].mean():.3f}")
    assert result["is_unknown"][nk].mean() > 0.5  # 0.95 with the committed reference
    assert result["is_unknown"][~nk].mean() < 0.05
    with pytest.raises(ValueError, match="has no 'X_missing'"):
        model.transfer_labels(reference, "cell_type", embedding_key="X_missing")
    with pytest.raises(ValueError, match="no column 'label'"):
        model.transfer_labels(reference, "label")
