"""Demand-targeted interventions on a trained SCTrilemma, ready to score on all three demands."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sctrilemma import metrics

if TYPE_CHECKING:
    from collections.abc import Sequence

    from anndata import AnnData

    from sctrilemma.model import SCTrilemma


def intervention_outputs(
    model: SCTrilemma,
    adata: AnnData,
    donor_key: str,
    alphas: Sequence[float] = (0.5, 1.0),
    n_clusters: int | None = None,
    seed: int = 0,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Embeddings and reconstructions after centroid shrinkage and donor centering of the latent tokens.

    The posterior-mean tokens are edited at each strength ``alpha`` (paper, "Demand-targeted
    interventions"): shrinkage toward k-means cluster centroids of the embedding (identity push) and
    removal of donor mean offsets (invariance push). The edited tokens give the embedding (their mean)
    and, through the decoder, the reconstruction, so each variant can be scored on identity, context
    invariance and expression fidelity with :class:`~sctrilemma.benchmark.Scorecard`.

    Parameters
    ----------
    model
        Trained model.
    adata
        Data with the model's genes and ``obs[donor_key]``.
    donor_key
        Column with donors.
    alphas
        Strengths in ``[0, 1]``.
    n_clusters
        k-means clusters for shrinkage; defaults to ``round(sqrt(n_cells / 50))``
        clipped to [2, 50].
    seed
        k-means seed.

    Returns
    -------
    ``{"<intervention>_<alpha>": (embedding (n_cells, n_hidden), expected counts (n_cells, n_genes))}``.
    """
    tokens = model.get_latent_tokens(adata)
    embedding = tokens.mean(axis=1)
    if n_clusters is None:
        n_clusters = int(np.clip(round(np.sqrt(tokens.shape[0] / 50)), 2, 50))
    clusters = metrics.kmeans_labels(embedding, n_clusters, random_state=seed)
    donors = adata.obs[donor_key].astype(str).to_numpy()
    library = np.asarray(adata.X.sum(axis=1)).ravel()
    outputs = {}
    for alpha in alphas:
        for name, edited in (
            ("centroid_shrinkage", metrics.centroid_shrinkage(tokens, clusters, alpha=alpha)),
            ("donor_centering", metrics.donor_centering(tokens, donors, alpha=alpha)),
        ):
            outputs[f"{name}_{alpha:g}"] = (
                edited.mean(axis=1),
                model.decode_latent_tokens(edited, library_size=library),
            )
    return outputs
