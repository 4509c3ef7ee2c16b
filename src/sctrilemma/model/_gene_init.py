"""What the module takes from its data before training: gene embeddings, the encoder's genes, and depth."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import torch
from scvi import REGISTRY_KEYS, settings

from sctrilemma._normalize import fit_log1p_cp10k_pca, log1p_cp10k
from sctrilemma.train._threads import torch_threads_kept

if TYPE_CHECKING:
    from sctrilemma.model import SCTrilemma

logger = logging.getLogger(__name__)

# Cells the principal components and the most variable genes are computed from: a start needs no more, and on 28k
# genes ARPACK took 5 s for 1,021 cells and 99 s for 20,420 on one thread.
MAX_PCA_CELLS = 5_000


def _cell_subset(counts, max_cells: int, seed: int):
    """``counts`` of a random subset of ``max_cells`` cells, in their order, drawn with ``seed``; all when fewer."""
    n_cells = counts.shape[0]
    if n_cells <= max_cells:
        return counts
    return counts[np.sort(np.random.default_rng(seed).choice(n_cells, max_cells, replace=False))]


def principal_gene_loadings(counts, n_components: int, *, max_cells: int = MAX_PCA_CELLS, seed: int = 0) -> np.ndarray:
    """Each gene's loadings on the top principal components of log1p(CP10K), ``(n_genes, k)``.

    Parameters
    ----------
    counts
        Raw counts ``(n_cells, n_genes)``, dense or sparse.
    n_components
        Components wanted; at most ``min(n_cells, n_genes) - 1`` are returned.
    max_cells
        A random subset of this many cells is used when there are more.
    seed
        Seed of the cell subset and of ARPACK's start vector.

    Returns
    -------
    Loadings with each component scaled to a mean square of one over the genes, the scale of ``N(0, 1)``.
    """
    n_genes = counts.shape[1]
    counts = _cell_subset(counts, max_cells, seed)
    n_components = min(n_components, min(counts.shape) - 1)
    if n_components < 1:
        return np.zeros((n_genes, 0), dtype=np.float32)
    pca, _ = fit_log1p_cp10k_pca(counts, n_components, seed=seed)
    return (pca.components_.T * np.sqrt(n_genes)).astype(np.float32)


def most_variable_genes(counts, n_genes: int, *, max_cells: int = MAX_PCA_CELLS, seed: int = 0) -> np.ndarray:
    """The ``n_genes`` most variable genes of log1p(CP10K), as a boolean mask ``(n_genes_total,)``.

    scanpy's :func:`~scanpy.pp.highly_variable_genes` (Seurat flavour, the one scanpy uses by default), on a random
    subset of ``max_cells`` cells when there are more. PyTorch's thread count is kept as it was.
    """
    import scanpy as sc
    from anndata import AnnData

    genes = AnnData(log1p_cp10k(_cell_subset(counts, max_cells, seed)))
    with torch_threads_kept():
        sc.pp.highly_variable_genes(genes, n_top_genes=n_genes, flavor="seurat")
    return genes.var["highly_variable"].to_numpy(dtype=bool)


def initialize_from_data(model: SCTrilemma, depth: np.ndarray) -> None:
    """Fit what an untrained ``model``'s module takes from its data before training: gene embeddings and depth.

    Called by ``train`` on in-memory data with counts (minified data is refused before, and a model streamed from the
    Census trains elsewhere), with each cell's total counts ``depth``; nothing changes once the model is trained. The
    gene embeddings start from the data's principal loadings when ``module.gene_embedding_init == "pca"`` (columns
    beyond the number of components keep their ``N(0, 1)`` start), the encoder reads the ``module.encoder_genes``
    most variable genes when the data have more, and
    :meth:`~sctrilemma.module.SCTrilemmaModule.fit_embedding_depth` sets the depth cells are embedded at.
    """
    module = model.module
    if model.is_trained_:
        return
    module.fit_embedding_depth(depth)
    counts = model.adata_manager.get_from_registry(REGISTRY_KEYS.X_KEY)
    seed = settings.seed or 0
    if module.encoder_genes is not None and module.n_input > module.encoder_genes:
        mask = most_variable_genes(counts, module.encoder_genes, seed=seed)
        module.encoder_gene_mask.copy_(torch.from_numpy(mask))
        logger.info("The encoder reads the %d most variable of the %d genes.", int(mask.sum()), module.n_input)
    if module.gene_embedding_init != "pca":
        return
    weight = module.gene_embedding.weight
    loadings = principal_gene_loadings(counts, weight.shape[1], seed=seed)
    with torch.no_grad():
        weight[:, : loadings.shape[1]] = torch.from_numpy(loadings).to(weight.device, weight.dtype)
    logger.info("Gene embeddings start from %d principal components of the data.", loadings.shape[1])
