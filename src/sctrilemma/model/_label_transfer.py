"""Label transfer from labelled reference cells to query cells by weighted nearest neighbours in the embedding."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from sklearn.neighbors import NearestNeighbors

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

UNKNOWN = "unknown"


def transfer_labels(
    reference_embedding: ArrayLike,
    reference_labels: ArrayLike,
    query_embedding: ArrayLike,
    *,
    n_neighbors: int = 15,
    max_uncertainty: float = 0.5,
    novelty_quantile: float | None = 0.99,
    unknown_label: str = UNKNOWN,
    query_index: pd.Index | None = None,
) -> pd.DataFrame:
    """Each query cell's label, from its ``n_neighbors`` nearest labelled reference cells.

    A neighbour's vote is weighted by a Gaussian kernel of its distance, with the cell's median neighbour distance as
    the bandwidth; a label's probability is its share of the weighted votes, and the uncertainty is one minus the
    largest share. A cell is called ``unknown_label`` when the vote is split (uncertainty above ``max_uncertainty``)
    or when it lies further from the reference than the reference's own cells of the predicted label lie from each
    other: its mean neighbour distance is above the ``novelty_quantile`` of theirs. The second rule catches cells of
    a type the reference lacks, whose neighbours agree but are far away.

    Parameters
    ----------
    reference_embedding
        ``(n_reference, n_features)`` embedding of the labelled reference cells.
    reference_labels
        ``(n_reference,)`` labels of the reference cells; missing values are not used.
    query_embedding
        ``(n_query, n_features)`` embedding of the query cells, by the same model.
    n_neighbors
        Reference neighbours per query cell.
    max_uncertainty
        Cells whose uncertainty is above this are called unknown; ``1`` switches the rule off.
    novelty_quantile
        Quantile of the reference cells' own mean neighbour distance, per label, beyond which a query cell is
        unknown; ``None`` switches the rule off.
    unknown_label
        The label given to unknown cells.
    query_index
        Index of the returned frame (e.g. the query's ``obs_names``).

    Returns
    -------
    One row per query cell: ``prediction`` (with ``unknown_label``), ``nearest_label`` (the vote's winner before the
    unknown rules), ``probability``, ``uncertainty``, ``distance_ratio`` (mean neighbour distance over the novelty
    threshold of the winning label; above 1 is further than the reference's own cells) and ``is_unknown``.
    """
    reference = np.asarray(reference_embedding, dtype=np.float64)
    query = np.asarray(query_embedding, dtype=np.float64)
    labels = pd.Series(np.asarray(reference_labels, dtype=object))
    if reference.ndim != 2 or query.ndim != 2 or reference.shape[1] != query.shape[1]:
        raise ValueError(
            f"The reference embedding {reference.shape} and the query embedding {query.shape} must be 2-D with the "
            "same number of features: embed both with the same model."
        )
    if labels.size != reference.shape[0]:
        raise ValueError(f"{labels.size} reference labels for {reference.shape[0]} reference cells.")
    if not 0 <= max_uncertainty <= 1 or (novelty_quantile is not None and not 0 < novelty_quantile <= 1):
        raise ValueError("`max_uncertainty` must lie in [0, 1] and `novelty_quantile` in (0, 1] or be None.")
    labelled = labels.notna().to_numpy()
    reference, labels = reference[labelled], labels[labelled].astype(str).to_numpy()
    if reference.shape[0] <= n_neighbors or n_neighbors < 1:
        raise ValueError(
            f"`n_neighbors={n_neighbors}` must be at least 1 and below the {reference.shape[0]} labelled reference "
            "cells."
        )
    classes, codes = np.unique(labels, return_inverse=True)
    index = NearestNeighbors(n_neighbors=n_neighbors + 1).fit(reference)

    # Each reference cell's mean distance to its own neighbours (itself excluded), and its label's threshold.
    threshold = np.full(classes.size, np.inf)
    if novelty_quantile is not None:
        own_distances = index.kneighbors(reference)[0][:, 1:].mean(1)
        threshold = np.array([np.quantile(own_distances[codes == k], novelty_quantile) for k in range(classes.size)])

    distances, neighbours = index.kneighbors(query, n_neighbors=n_neighbors)
    bandwidth = np.maximum(np.median(distances, axis=1, keepdims=True), 1e-12)
    weights = np.exp(-0.5 * (distances / bandwidth) ** 2)
    votes = np.zeros((query.shape[0], classes.size))
    np.add.at(votes, (np.arange(query.shape[0])[:, None], codes[neighbours]), weights)
    probabilities = votes / votes.sum(1, keepdims=True)
    winner = probabilities.argmax(1)
    probability = probabilities[np.arange(query.shape[0]), winner]
    distance_ratio = distances.mean(1) / np.maximum(threshold[winner], 1e-12)  # 0 without the novelty rule
    is_unknown = (1.0 - probability > max_uncertainty) | (distance_ratio > 1.0)
    nearest = classes[winner]
    prediction = np.where(is_unknown, unknown_label, nearest)
    return pd.DataFrame(
        {
            "prediction": pd.Categorical(prediction, categories=list(dict.fromkeys([*classes, unknown_label]))),
            "nearest_label": pd.Categorical(nearest, categories=classes),
            "probability": probability,
            "uncertainty": 1.0 - probability,
            "distance_ratio": distance_ratio,
            "is_unknown": is_unknown,
        },
        index=query_index,
    )
