"""scanpy's neighbours, UMAP and Leiden on an SCTrilemma embedding at a real data set's size.

Below 4,096 cells scanpy computes exact neighbours; from there on it uses pynndescent, so a workflow tested on the
3,000-cell example alone never reaches the approximate path that real data sets take.
"""

from __future__ import annotations

import anndata as ad
import numpy as np
import pytest
import scanpy as sc
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score

from sctrilemma import SCTrilemma
from sctrilemma.data import example_reference_dir, load_example

N_COPIES = 4  # 4 x 3,000 = 12,000 cells
SUBSAMPLING = 0.8  # each copy keeps each count with this probability: cells of the same type, not duplicates


def _example_at_scale(n_copies: int) -> ad.AnnData:
    """The example, stacked ``n_copies`` times, each copy binomially thinned with its own seed."""
    example = load_example()
    counts = sp.csr_matrix(example.X)
    copies = []
    for copy in range(n_copies):
        rng = np.random.default_rng(copy)
        thinned = counts.copy()
        thinned.data = rng.binomial(thinned.data.astype(np.int64), SUBSAMPLING).astype(np.float32)
        thinned.eliminate_zeros()
        piece = ad.AnnData(thinned, obs=example.obs.copy(), var=example.var.copy())
        piece.obs_names = [f"{name}-copy{copy}" for name in example.obs_names]
        copies.append(piece)
    return ad.concat(copies, merge="same")


@pytest.mark.slow
def test_neighbors_umap_leiden_on_twelve_thousand_cells():
    adata = _example_at_scale(N_COPIES)
    sc.pp.filter_cells(adata, min_counts=1)
    assert adata.n_obs > 10_000
    model = SCTrilemma.load_query_data(adata, example_reference_dir())
    adata.obsm["X_sctrilemma"] = model.get_latent_representation()

    sc.pp.neighbors(adata, use_rep="X_sctrilemma", random_state=0)
    distances = adata.obsp["distances"]
    assert sp.issparse(distances)
    assert distances.shape == (adata.n_obs, adata.n_obs)
    neighbours_per_cell = np.diff(distances.indptr)
    assert neighbours_per_cell.min() >= 14  # scanpy's default of 15 neighbours, the cell itself included
    assert adata.obsp["connectivities"].shape == (adata.n_obs, adata.n_obs)

    sc.tl.umap(adata, random_state=0)
    assert adata.obsm["X_umap"].shape == (adata.n_obs, 2)
    assert np.isfinite(adata.obsm["X_umap"]).all()

    # At scanpy's default resolution Leiden splits the four cell types (B, CD4 T, NK, monocytes) into about 16
    # clusters; at 0.2 it finds about one cluster per type.
    sc.tl.leiden(adata, resolution=0.2, flavor="igraph", n_iterations=2, directed=False, random_state=0)
    assert 4 <= adata.obs["leiden"].nunique() <= 10
    assert adjusted_rand_score(adata.obs["cell_type"], adata.obs["leiden"]) > 0.7
