"""Label transfer: the classifier on the embedding, its unknown class under a query's shift, saving and loading."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from sctrilemma import SCTrilemma
from sctrilemma.data import example_reference_dir, load_example
from sctrilemma.data._example import HELD_OUT_DONORS, REFERENCE_DONORS
from sctrilemma.model import LabelClassifier

if TYPE_CHECKING:
    from pathlib import Path

N_FEATURES = 8


def _blobs(seed: int, n_per_class: int = 200, centres: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Three Gaussian classes ``a``, ``b``, ``c`` in 8 dimensions, 4 units apart, unit spread."""
    rng = np.random.default_rng(seed)
    centres = np.eye(3, N_FEATURES) * 4.0 if centres is None else centres
    x = np.concatenate([centre + rng.normal(size=(n_per_class, N_FEATURES)) for centre in centres])
    labels = np.repeat(np.array(["a", "b", "c"][: len(centres)]), n_per_class)
    return x, labels


@pytest.fixture(scope="module")
def classifier() -> LabelClassifier:
    x, labels = _blobs(0)
    return LabelClassifier.fit(x, labels, labels_key="cell_type")


def test_labels_and_calibrated_probabilities(classifier: LabelClassifier) -> None:
    x, labels = _blobs(1)
    result = classifier.predict(x)
    accuracy = (result["prediction"].astype(str).to_numpy() == labels).mean()
    assert accuracy > 0.97
    assert result["is_unknown"].mean() < 0.03
    # calibrated: the mean probability of the winner matches how often the winner is right
    correct = result["nearest_label"].astype(str).to_numpy() == labels
    assert abs(result["probability"].mean() - correct.mean()) < 0.02
    np.testing.assert_allclose(result["uncertainty"], 1 - result["probability"])
    np.testing.assert_allclose(classifier.predict_proba(x).sum(1), 1.0)


def test_a_type_the_reference_lacks_is_unknown(classifier: LabelClassifier) -> None:
    x, labels = _blobs(2)
    novel = np.zeros(N_FEATURES)
    novel[4] = 6.0  # a fourth type, 6 units from the origin, as far from each known class
    x_novel = novel + np.random.default_rng(3).normal(size=(200, N_FEATURES))
    result = classifier.predict(np.concatenate([x, x_novel]))
    is_novel = np.arange(len(result)) >= len(x)
    assert result["is_unknown"][is_novel].mean() > 0.9
    assert result["is_unknown"][~is_novel].mean() < 0.05
    assert (result.loc[is_novel, "prediction"] == "unknown").mean() > 0.9
    assert classifier.predict(x_novel, novelty=False)["is_unknown"].mean() < 0.5  # the probability alone misses it


def test_a_shifted_query_keeps_its_labels(classifier: LabelClassifier) -> None:
    """Another chemistry: every class moved and spread wider; only the novel type is unknown."""
    rng = np.random.default_rng(4)
    x, labels = _blobs(5)
    moved = np.eye(3, N_FEATURES) * 4.0 + rng.normal(scale=0.6, size=(3, N_FEATURES))
    spread = 1.25
    shifted = moved[np.repeat(np.arange(3), 200)] + spread * (
        x - np.eye(3, N_FEATURES)[np.repeat(np.arange(3), 200)] * 4
    )
    novel = np.full(N_FEATURES, 0.0)
    novel[5] = 8.0
    x_novel = novel + spread * rng.normal(size=(150, N_FEATURES))
    result = classifier.predict(np.concatenate([shifted, x_novel]))
    is_novel = np.arange(len(result)) >= len(shifted)
    known = result[~is_novel]
    assert (known["prediction"].astype(str).to_numpy() == labels).mean() > 0.93
    assert known["is_unknown"].mean() < 0.05
    assert result["is_unknown"][is_novel].mean() > 0.8
    # the query's shift is measured and allowed for; a query like the reference has none
    assert result.attrs["query_shift"] > 1.2
    assert classifier.predict(_blobs(7)[0]).attrs["query_shift"] == pytest.approx(1.0, abs=0.1)


def test_round_trip_and_errors(classifier: LabelClassifier) -> None:
    x, _ = _blobs(6)
    restored = LabelClassifier.from_dict(classifier.to_dict())
    assert restored.labels_key == "cell_type"
    np.testing.assert_array_equal(restored.classes, classifier.classes)
    np.testing.assert_allclose(restored.predict_proba(x), classifier.predict_proba(x))
    with pytest.raises(ValueError, match="reads 8 features"):
        classifier.predict(x[:, :3])
    with pytest.raises(ValueError, match="max_uncertainty"):
        classifier.predict(x, max_uncertainty=1.5)
    with pytest.raises(ValueError, match="at least two labels"):
        LabelClassifier.fit(x, np.repeat("a", len(x)))
    with pytest.raises(ValueError, match="one label per cell"):
        LabelClassifier.fit(x, np.repeat("a", 10))


def test_a_reference_carries_its_classifier_to_a_query(tmp_path: Path) -> None:
    """Kang 2018 PBMCs: reference donors labelled, held-out donors labelled by the saved reference's classifier."""
    adata = load_example()
    reference = adata[adata.obs["donor"].isin(REFERENCE_DONORS)].copy()
    query = adata[adata.obs["donor"].isin(HELD_OUT_DONORS)].copy()
    truth = query.obs["cell_type"].astype(str).to_numpy()
    reference_model = SCTrilemma.load_query_data(reference, example_reference_dir())
    with pytest.raises(ValueError, match="no label classifier"):
        reference_model.predict_labels()
    with pytest.raises(ValueError, match="no column 'label'"):
        reference_model.fit_label_classifier("label")
    reference_model.fit_label_classifier("cell_type")
    reference_model.save(tmp_path / "labelled")

    query_before = query.copy()
    model = SCTrilemma.load_query_data(query, tmp_path / "labelled")
    assert (query.X != query_before.X).nnz == 0  # the user's query is not modified
    result = model.predict_labels()
    assert result.index.equals(query.obs_names)
    accuracy = (result["prediction"].astype(str).to_numpy() == truth).mean()
    print(f"accuracy {accuracy:.3f}, unknown {result['is_unknown'].mean():.3f}")
    assert accuracy > 0.95
    assert result["is_unknown"].mean() < 0.05

    without_nk = reference_model.adata[reference_model.adata.obs["cell_type"] != "NK cells"].copy()
    reference_model.fit_label_classifier("cell_type", adata=without_nk)
    model = SCTrilemma.load_query_data(query, reference_model)
    result = model.predict_labels()
    nk = truth == "NK cells"
    print(f"unknown: NK {result['is_unknown'][nk].mean():.3f}, others {result['is_unknown'][~nk].mean():.3f}")
    assert result["is_unknown"][nk].mean() > 0.5
    assert result["is_unknown"][~nk].mean() < 0.05


def test_two_classes() -> None:
    x, labels = _blobs(8, centres=np.eye(2, N_FEATURES) * 4.0)
    classifier = LabelClassifier.fit(x, labels)
    assert classifier.coef.shape == (2, N_FEATURES)
    x_test, truth = _blobs(9, centres=np.eye(2, N_FEATURES) * 4.0)
    result = classifier.predict(x_test)
    assert (result["prediction"].astype(str).to_numpy() == truth).mean() > 0.97
