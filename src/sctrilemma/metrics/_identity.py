"""RQ1 biological-identity metrics: k-means NMI/ARI, label ASW, cLISI and isolated-label silhouette.

All but k-means NMI/ARI delegate to ``scib_metrics`` (the paper computes every RQ1 embedding metric with it);
k-means runs through scikit-learn because the paper averages NMI/ARI over 20 seeded initialisations, which
``scib_metrics.nmi_ari_cluster_labels_kmeans`` (one fixed seed) cannot express.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scvi.utils import dependencies
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.neighbors import NearestNeighbors

from ._errors import check_embedding, check_labels, require_classes

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from scib_metrics.nearest_neighbors import NeighborsResults


@dependencies("scib_metrics")
def exact_neighbors(X: ArrayLike, n_neighbors: int = 90) -> NeighborsResults:
    """Exact Euclidean k-nearest-neighbour graph as scib-metrics' ``NeighborsResults``.

    Each row lists the cell itself first (distance 0), then its ``n_neighbors - 1`` nearest other cells, as scib-metrics
    expects. Exact brute-force search stands in for scib-metrics' approximate ``pynndescent`` default: it is
    deterministic and affordable on the <= 10,000-cell evaluation samples.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    n_neighbors
        Neighbours per cell, counting the cell itself (scib-metrics and the paper use 90 for LISI).

    Returns
    -------
    Neighbour indices and distances, each of shape ``(n_obs, n_neighbors)``.
    """
    from scib_metrics.nearest_neighbors import NeighborsResults

    X = check_embedding(X)
    if not 2 <= n_neighbors <= X.shape[0]:
        raise ValueError(
            f"`n_neighbors={n_neighbors}` must be between 2 and the number of cells ({X.shape[0]}); pass a smaller "
            "`n_neighbors` or more cells."
        )
    knn = NearestNeighbors(n_neighbors=n_neighbors - 1, algorithm="brute", metric="euclidean").fit(X)
    distances, indices = knn.kneighbors()  # no query: each cell's own row is excluded, so add it back in front
    n_obs = X.shape[0]
    indices = np.hstack([np.arange(n_obs)[:, None], indices])
    distances = np.hstack([np.zeros((n_obs, 1)), distances])
    return NeighborsResults(indices=indices, distances=distances)


def nmi_ari_kmeans(X: ArrayLike, labels: ArrayLike, *, n_init: int = 20, seed: int = 42) -> dict[str, float]:
    """NMI and ARI between k-means clusters and labels, averaged over ``n_init`` seeded k-means runs.

    k-means uses k = number of labels; each run has one k-means++ initialisation (seed ``seed + r``), and the NMI
    (arithmetic-mean normalisation) and ARI of the ``n_init`` partitions are averaged, as in :cite:p:`sctrilemma`
    (Appendix C.2). Averaging, rather than keeping the lowest-inertia run, measures how reliably the
    embedding's geometry recovers the labels.

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    labels
        Cell-type labels of shape ``(n_obs,)``.
    n_init
        Number of k-means initialisations to average over.
    seed
        Seed of the first initialisation.

    Returns
    -------
    ``{"nmi": float, "ari": float}``, each a mean over the ``n_init`` runs.
    """
    X = check_embedding(X)
    labels = check_labels(labels, X.shape[0], name="labels")
    n_clusters = require_classes(labels, metric="k-means NMI/ARI", name="labels", what="cell types").size
    if n_init < 1:
        raise ValueError(f"`n_init` must be at least 1; got {n_init}.")
    nmi, ari = [], []
    for r in range(n_init):
        predicted = KMeans(n_clusters=n_clusters, n_init=1, random_state=seed + r).fit_predict(X)
        nmi.append(normalized_mutual_info_score(labels, predicted, average_method="arithmetic"))
        ari.append(adjusted_rand_score(labels, predicted))
    return {"nmi": float(np.mean(nmi)), "ari": float(np.mean(ari))}


@dependencies("scib_metrics")
def asw_label(X: ArrayLike, labels: ArrayLike) -> float:
    """Rescaled label silhouette (ASW-label), ``(1 + mean_i s_i) / 2`` with Euclidean distance (scib-metrics).

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    labels
        Cell-type labels of shape ``(n_obs,)``.

    Returns
    -------
    Score in ``[0, 1]``; higher means cell types are more compact and separated.
    """
    import scib_metrics

    X = check_embedding(X)
    labels = check_labels(labels, X.shape[0], name="labels")
    require_classes(labels, metric="ASW-label", name="labels", what="cell types")
    return float(scib_metrics.silhouette_label(X, labels, rescale=True))


@dependencies("scib_metrics")
def clisi(X: ArrayLike, labels: ArrayLike, *, n_neighbors: int = 90, perplexity: float | None = None) -> float:
    """Cell-type LISI, ``(C - median_i L_i) / (C - 1)`` on a ``n_neighbors`` graph (scib-metrics ``clisi_knn``).

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    labels
        Cell-type labels of shape ``(n_obs,)``.
    n_neighbors
        Size of the exact kNN graph (:func:`~sctrilemma.metrics.exact_neighbors`), counting each cell itself.
    perplexity
        Effective neighbourhood size; ``None`` means ``n_neighbors // 3`` (30 for the default graph).

    Returns
    -------
    Score in ``[0, 1]``; 1 means every neighbourhood holds a single cell type.
    """
    import scib_metrics

    X = check_embedding(X)
    labels = check_labels(labels, X.shape[0], name="labels")
    require_classes(labels, metric="cLISI", name="labels", what="cell types")
    neighbors = exact_neighbors(X, n_neighbors)
    return float(scib_metrics.clisi_knn(neighbors, labels, perplexity=perplexity, scale=True))


@dependencies("scib_metrics")
def isolated_labels(X: ArrayLike, labels: ArrayLike, donors: ArrayLike) -> float:
    """Isolated-label silhouette: rescaled label silhouette macro-averaged over the least-shared cell types.

    The isolated types are those present in the fewest donors, ``B_c = min_c' B_c'``; each one's score is the mean of
    ``(1 + s_i) / 2`` over its cells, with ``s_i`` the Euclidean cell-type silhouette over all cells (scib-metrics
    ``isolated_labels``). A single donor is allowed: then every cell type is isolated.

    When every cell type occurs in the same number of donors (e.g. all types in all donors), every type counts as
    isolated and the score is the label ASW averaged per type rather than per cell: close to
    :func:`~sctrilemma.metrics.asw_label`, and equal to it when every type has the same number of cells (as in the
    scorecard's samples when each type has at least ``max_per_label`` cells).

    Parameters
    ----------
    X
        Embedding of shape ``(n_obs, n_features)``.
    labels
        Cell-type labels of shape ``(n_obs,)``.
    donors
        Donor of each cell, shape ``(n_obs,)``.

    Returns
    -------
    Score in ``[0, 1]``; higher means the rarest-shared cell types stay separated.
    """
    import scib_metrics

    X = check_embedding(X)
    labels = check_labels(labels, X.shape[0], name="labels")
    donors = check_labels(donors, X.shape[0], name="donors")
    require_classes(labels, metric="Isolated-label silhouette", name="labels", what="cell types")
    return float(scib_metrics.isolated_labels(X, labels, donors, rescale=True, iso_threshold=None))
