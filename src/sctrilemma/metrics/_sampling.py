"""Seeded evaluation samples: label-stratified RQ1 samples and donor-balanced common-cohort repeats."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._errors import check_labels

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def _label_quotas(counts: np.ndarray, max_cells: int, max_per_label: int, rng: np.random.Generator) -> np.ndarray:
    """Cells to draw per label: cap at ``max_per_label``, then water-fill down to ``max_cells`` total.

    Water-filling lowers one common cap until the total fits, so every label with at most that many cells is kept
    whole ("retaining cells from rare types"); the few cells left over go, one each, to randomly chosen larger labels.
    """
    quotas = np.minimum(counts, max_per_label)
    if quotas.sum() <= max_cells:
        return quotas
    # Largest common cap c with sum(min(n_l, c)) <= max_cells; the total is monotone in c, so bisect.
    low, high = 0, int(quotas.max())
    while low < high:
        mid = (low + high + 1) // 2
        if np.minimum(counts, mid).sum() <= max_cells:
            low = mid
        else:
            high = mid - 1
    quotas = np.minimum(counts, low)
    remainder = max_cells - int(quotas.sum())
    larger = np.flatnonzero(counts > low)  # more of these than `remainder`, or cap low + 1 would have fitted
    quotas[rng.choice(larger, size=remainder, replace=False)] += 1
    return quotas


def stratified_subsample(
    labels: ArrayLike,
    *,
    max_cells: int = 10_000,
    max_per_label: int = 500,
    seed: int = 42,
) -> np.ndarray:
    """One label-stratified evaluation sample of the RQ1 benchmark :cite:p:`sctrilemma`.

    At most ``max_per_label`` cells are drawn from each label (cell type); if that still exceeds ``max_cells``, a common
    per-label cap is lowered until the sample fits, so rare labels are kept whole.

    Parameters
    ----------
    labels
        Cell-type labels of shape ``(n_obs,)``.
    max_cells
        Upper bound on the sample size.
    max_per_label
        Upper bound on the cells drawn per label.
    seed
        Seed of the draw; the same seed gives the same indices.

    Returns
    -------
    Sorted integer indices into ``labels`` of shape ``(n_sample,)``, ``n_sample <= max_cells``.
    """
    labels = check_labels(labels, np.asarray(labels).shape[0], name="labels")
    if labels.size == 0:
        raise ValueError("`labels` is empty; there are no cells to sample.")
    if max_cells < 1 or max_per_label < 1:
        raise ValueError(f"`max_cells` and `max_per_label` must be positive; got {max_cells} and {max_per_label}.")
    rng = np.random.default_rng(seed)
    uniques, codes, counts = np.unique(labels, return_inverse=True, return_counts=True)
    quotas = _label_quotas(counts, max_cells, max_per_label, rng)
    chosen = [rng.choice(np.flatnonzero(codes == k), size=q, replace=False) for k, q in enumerate(quotas) if q > 0]
    return np.sort(np.concatenate(chosen))


def stratified_subsamples(
    labels: ArrayLike,
    *,
    n_repeats: int = 20,
    max_cells: int = 10_000,
    max_per_label: int = 500,
    seed: int = 42,
) -> list[np.ndarray]:
    """``n_repeats`` stratified samples (:func:`~sctrilemma.metrics.stratified_subsample`) with seeds ``seed, seed + 1, ...``.

    Parameters
    ----------
    labels
        Cell-type labels of shape ``(n_obs,)``.
    n_repeats
        Number of samples; the paper averages each RQ1 metric over 20.
    max_cells
        Upper bound on each sample's size.
    max_per_label
        Upper bound on the cells drawn per label.
    seed
        Seed of the first repeat.

    Returns
    -------
    ``n_repeats`` sorted index arrays, each of shape ``(n_sample,)``.
    """
    if n_repeats < 1:
        raise ValueError(f"`n_repeats` must be at least 1; got {n_repeats}.")
    return [
        stratified_subsample(labels, max_cells=max_cells, max_per_label=max_per_label, seed=seed + r)
        for r in range(n_repeats)
    ]


def cohort_subsample(
    cell_types: ArrayLike,
    states: ArrayLike,
    donors: ArrayLike,
    *,
    n_donors_per_state: int = 2,
    n_cells_per_donor: int = 10,
    seed: int = 42,
) -> np.ndarray:
    """One donor-balanced repeat of a common cohort (RQ2-RQ4) :cite:p:`sctrilemma`.

    For every cell type that has at least ``n_donors_per_state`` donors with ``n_cells_per_donor`` or more cells of
    that type in *each* disease state, the repeat draws ``n_donors_per_state`` such donors per state and
    ``n_cells_per_donor`` cells from each (2 x 2 x 10 = 40 cells per type with the paper's defaults). Other cell
    types are left out.

    Parameters
    ----------
    cell_types
        Annotated cell type of shape ``(n_obs,)``.
    states
        Disease state of shape ``(n_obs,)`` (e.g. normal vs. disease).
    donors
        Donor of shape ``(n_obs,)``.
    n_donors_per_state
        Donors drawn per cell type and state.
    n_cells_per_donor
        Cells drawn per donor, cell type and state.
    seed
        Seed of the draw.

    Returns
    -------
    Sorted integer indices of shape ``(n_eligible_types * n_states * n_donors_per_state * n_cells_per_donor,)``.
    """
    cell_types = check_labels(cell_types, np.asarray(cell_types).shape[0], name="cell_types")
    n_obs = cell_types.shape[0]
    states = check_labels(states, n_obs, name="states")
    donors = check_labels(donors, n_obs, name="donors")
    if n_donors_per_state < 1 or n_cells_per_donor < 1:
        raise ValueError(
            f"`n_donors_per_state` and `n_cells_per_donor` must be positive; got {n_donors_per_state} and "
            f"{n_cells_per_donor}."
        )
    rng = np.random.default_rng(seed)
    all_states = np.unique(states)
    chosen: list[np.ndarray] = []
    for cell_type in np.unique(cell_types):
        groups = []  # per state: (eligible donors, their cell indices)
        for state in all_states:
            in_stratum = np.flatnonzero((cell_types == cell_type) & (states == state))
            donor_ids, counts = np.unique(donors[in_stratum], return_counts=True)
            eligible = donor_ids[counts >= n_cells_per_donor]
            if eligible.size < n_donors_per_state:
                break
            groups.append((eligible, in_stratum))
        else:
            for eligible, in_stratum in groups:
                for donor in rng.choice(eligible, size=n_donors_per_state, replace=False):
                    pool = in_stratum[donors[in_stratum] == donor]
                    chosen.append(rng.choice(pool, size=n_cells_per_donor, replace=False))
    if not chosen:
        raise ValueError(
            f"No cell type has {n_donors_per_state} donors with >= {n_cells_per_donor} cells in every state "
            f"({', '.join(map(repr, all_states))}); lower `n_donors_per_state` / `n_cells_per_donor` or pick another "
            "cohort."
        )
    return np.sort(np.concatenate(chosen))


def cohort_subsamples(
    cell_types: ArrayLike,
    states: ArrayLike,
    donors: ArrayLike,
    *,
    n_repeats: int = 20,
    n_donors_per_state: int = 2,
    n_cells_per_donor: int = 10,
    seed: int = 42,
) -> list[np.ndarray]:
    """``n_repeats`` cohort repeats (:func:`~sctrilemma.metrics.cohort_subsample`) with seeds ``seed, seed + 1, ...`` (paper: 42-61).

    Parameters
    ----------
    cell_types
        Annotated cell type of shape ``(n_obs,)``.
    states
        Disease state of shape ``(n_obs,)``.
    donors
        Donor of shape ``(n_obs,)``.
    n_repeats
        Number of repeats.
    n_donors_per_state
        Donors drawn per cell type and state.
    n_cells_per_donor
        Cells drawn per donor, cell type and state.
    seed
        Seed of the first repeat.

    Returns
    -------
    ``n_repeats`` sorted index arrays.
    """
    if n_repeats < 1:
        raise ValueError(f"`n_repeats` must be at least 1; got {n_repeats}.")
    return [
        cohort_subsample(
            cell_types,
            states,
            donors,
            n_donors_per_state=n_donors_per_state,
            n_cells_per_donor=n_cells_per_donor,
            seed=seed + r,
        )
        for r in range(n_repeats)
    ]
