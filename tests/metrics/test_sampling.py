from __future__ import annotations

import numpy as np
import pytest

from sctrilemma.metrics._sampling import (
    cohort_subsample,
    cohort_subsamples,
    stratified_subsample,
    stratified_subsamples,
)


def _labels(counts: dict[str, int]) -> np.ndarray:
    labels = np.concatenate([[name] * n for name, n in counts.items()])
    return np.random.default_rng(0).permutation(labels)


def test_stratified_water_fills_and_keeps_rare_labels():
    labels = _labels({"rare": 5, "a": 100, "b": 1000, "c": 2000})
    idx = stratified_subsample(labels, max_cells=600, max_per_label=500, seed=0)
    assert idx.size == 600
    assert np.array_equal(idx, np.unique(idx))  # sorted, no repeats
    names, counts = np.unique(labels[idx], return_counts=True)
    per_label = dict(zip(names, counts, strict=True))
    # Common cap c with 5 + 100 + 2c <= 600 is 247 (599 cells), so "rare" and "a" stay whole and the one
    # left-over cell goes to b or c.
    assert per_label["rare"] == 5
    assert per_label["a"] == 100
    assert sorted(per_label[k] for k in "bc") == [247, 248]


def test_stratified_caps_per_label_and_returns_everything_when_small():
    labels = _labels({"a": 1200, "b": 30})
    idx = stratified_subsample(labels, seed=1)
    names, counts = np.unique(labels[idx], return_counts=True)
    assert dict(zip(names, counts, strict=True)) == {"a": 500, "b": 30}
    small = _labels({"a": 40, "b": 7})
    assert np.array_equal(stratified_subsample(small, seed=1), np.arange(47))


def test_stratified_is_seeded():
    labels = _labels({"a": 3000, "b": 3000})
    first = stratified_subsample(labels, max_cells=1000, seed=3)
    assert np.array_equal(first, stratified_subsample(labels, max_cells=1000, seed=3))
    assert not np.array_equal(first, stratified_subsample(labels, max_cells=1000, seed=4))


def test_stratified_repeats_use_consecutive_seeds():
    labels = _labels({"a": 800, "b": 900})
    repeats = stratified_subsamples(labels, n_repeats=3, max_cells=400, seed=42)
    assert len(repeats) == 3
    for r, idx in enumerate(repeats):
        assert np.array_equal(idx, stratified_subsample(labels, max_cells=400, seed=42 + r))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"labels": np.array(["a", None, "b"], dtype=object)}, "`labels` has 1 missing values"),
        ({"labels": np.array([], dtype=str)}, "`labels` is empty"),
        ({"labels": np.array(["a", "b"]), "max_cells": 0}, "must be positive"),
    ],
)
def test_stratified_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        stratified_subsample(**kwargs)


def test_stratified_repeats_reject_zero_repeats():
    with pytest.raises(ValueError, match="`n_repeats` must be at least 1"):
        stratified_subsamples(np.array(["a", "b"]), n_repeats=0)


def _cohort() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Type T1: three donors per state with 12 cells each; T2: one state has a single donor with >= 10 cells."""
    types, states, donors = [], [], []
    for state, state_donors in (("normal", ["n1", "n2", "n3"]), ("disease", ["d1", "d2", "d3"])):
        for donor in state_donors:
            types += ["T1"] * 12
            states += [state] * 12
            donors += [donor] * 12
    for state, donor, n in (("normal", "n1", 15), ("normal", "n2", 15), ("disease", "d1", 15), ("disease", "d2", 4)):
        types += ["T2"] * n
        states += [state] * n
        donors += [donor] * n
    return np.array(types), np.array(states), np.array(donors)


def test_cohort_draws_two_donors_per_state_and_ten_cells_each():
    types, states, donors = _cohort()
    idx = cohort_subsample(types, states, donors, seed=42)
    assert idx.size == 40  # only T1 is eligible: 2 states x 2 donors x 10 cells
    assert set(types[idx]) == {"T1"}
    for state in ("normal", "disease"):
        chosen, counts = np.unique(donors[idx][states[idx] == state], return_counts=True)
        assert chosen.size == 2
        assert counts.tolist() == [10, 10]


def test_cohort_is_seeded_and_repeats_use_consecutive_seeds():
    types, states, donors = _cohort()
    repeats = cohort_subsamples(types, states, donors, n_repeats=3, seed=42)
    for r, idx in enumerate(repeats):
        assert np.array_equal(idx, cohort_subsample(types, states, donors, seed=42 + r))
    assert not np.array_equal(repeats[0], repeats[1])


def test_cohort_without_eligible_type_raises():
    types, states, donors = _cohort()
    with pytest.raises(ValueError, match="No cell type has 4 donors with >= 10 cells in every state"):
        cohort_subsample(types, states, donors, n_donors_per_state=4)


def test_cohort_rejects_mismatched_lengths():
    types, states, donors = _cohort()
    with pytest.raises(ValueError, match="`donors` has 10 entries"):
        cohort_subsample(types, states, donors[:10])
