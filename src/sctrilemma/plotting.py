"""Plots for embeddings."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from anndata import AnnData
    from matplotlib.figure import Figure


def umap_figure(
    adata: AnnData, embedding_key: str, color: Sequence[str] = ("cell_type",), n_neighbors: int = 15
) -> Figure:
    """UMAP of ``adata.obsm[embedding_key]``, one panel per ``color`` column.

    Works on a copy: ``adata`` is not modified.

    Parameters
    ----------
    adata
        Data with the embedding.
    embedding_key
        Key in ``adata.obsm``.
    color
        Columns of ``adata.obs`` to colour by.
    n_neighbors
        Neighbours of the kNN graph.

    Returns
    -------
    The matplotlib figure.
    """
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt
    import scanpy as sc

    missing = [c for c in color if c not in adata.obs.columns]
    if missing:
        raise ValueError(f"Columns {missing} are not in adata.obs; available: {list(adata.obs.columns)}.")
    work = adata.copy()
    sc.pp.neighbors(work, use_rep=embedding_key, n_neighbors=n_neighbors, metric="cosine")
    sc.tl.umap(work, random_state=0)
    figure, axes = plt.subplots(1, len(color), figsize=(5.5 * len(color), 4.5), squeeze=False)
    for ax, column in zip(axes[0], color, strict=True):
        sc.pl.umap(work, color=column, ax=ax, show=False, title=f"{embedding_key}: {column}", frameon=False)
    figure.tight_layout()
    return figure
