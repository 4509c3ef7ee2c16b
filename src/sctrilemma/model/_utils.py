"""Small helpers shared by the model's mixins."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
import torch
from scvi import REGISTRY_KEYS

from sctrilemma._constants import SCT_REGISTRY_KEYS
from sctrilemma._validation import cell_statistics, check_no_empty_cells, iter_row_chunks, refuse_empty_cells
from sctrilemma.data._genes import find_symbol_column

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from anndata import AnnData
    from mudata import MuData
    from scvi.data import AnnDataManager


def rna_modality(adata: AnnData | MuData, registry: dict) -> AnnData:
    """The AnnData with the modelled genes: ``adata`` itself, or the RNA modality of a MuData."""
    if hasattr(adata, "mod"):
        modalities = registry["setup_args"].get("modalities") or {"rna_layer": "rna"}
        return adata.mod[modalities["rna_layer"]]
    return adata


def gene_names(adata: AnnData | MuData, registry: dict) -> np.ndarray:
    """Names of the modelled genes (``var_names``)."""
    return np.asarray(rna_modality(adata, registry).var_names.astype(str), dtype=object)


def gene_symbols(adata: AnnData | MuData, registry: dict) -> np.ndarray | None:
    """Gene symbols from a conventional ``var`` column (e.g. ``gene_symbol``), if there is one."""
    var = rna_modality(adata, registry).var
    column = find_symbol_column(var)
    return None if column is None else np.asarray(var[column].astype(str), dtype=object)


def count_matrix(adata: AnnData | MuData, registry: dict):
    """The matrix a model registered for ``adata`` (X or the setup's layer), before registration."""
    setup_args = registry["setup_args"]
    rna = rna_modality(adata, registry)
    layer = setup_args.get("layer", setup_args.get("rna_layer"))
    if layer is None:
        return rna.X
    if layer not in rna.layers:
        raise ValueError(
            f"The model reads counts from layer {layer!r}, which this data lacks (layers: {list(rna.layers)})."
        )
    return rna.layers[layer]


def layer_matrix(adata: AnnData, layer: str):
    """``adata.layers[layer]``, or a ``ValueError`` listing the layers."""
    if layer not in adata.layers:
        raise ValueError(
            f"`layer={layer!r}` is not in the layers ({list(adata.layers)}); pass one of them or None for X."
        )
    return adata.layers[layer]


def depth_and_expressed_genes_per_cell(manager: AnnDataManager) -> tuple[np.ndarray, np.ndarray]:
    """Total counts and expressed genes of each registered cell, each ``(n_obs,)``; a ``ValueError`` if a cell has none.

    Data attached to a loaded model skips :meth:`~sctrilemma.SCTrilemma.setup_anndata`'s checks, so
    :meth:`~sctrilemma.SCTrilemma.train` refuses such cells here, before any training is spent.
    """
    totals, n_expressed = cell_statistics(manager.get_from_registry(REGISTRY_KEYS.X_KEY))
    names = rna_modality(manager.adata, manager.registry).obs_names
    fix = "`sc.pp.filter_cells(adata, min_counts=1)`, then attach the filtered data (`model.adata = adata`)"
    refuse_empty_cells(totals, names, where="the model's data", fix=fix)
    return totals, n_expressed


def measured_genes_per_dataset(manager: AnnDataManager) -> torch.Tensor | None:
    """``(n_datasets, n_genes)``: the genes that at least one cell of each registered dataset expresses.

    A gene no cell of a study expresses was most likely not measured there (another gene panel or annotation), so
    its zeros in that study's cells say nothing about them. ``None`` with a single dataset, where every gene counts.
    """
    n_datasets = len(manager.get_state_registry(SCT_REGISTRY_KEYS.DATASET_KEY).categorical_mapping)
    if n_datasets < 2:
        return None
    dataset = np.asarray(manager.get_from_registry(SCT_REGISTRY_KEYS.DATASET_KEY)).ravel().astype(np.int64)
    matrix = manager.get_from_registry(REGISTRY_KEYS.X_KEY)
    measured = np.zeros((n_datasets, matrix.shape[1]), dtype=bool)
    start = 0
    for block in iter_row_chunks(matrix):
        codes = dataset[start : start + block.shape[0]]
        start += block.shape[0]
        expressed = block > 0
        for code in np.unique(codes):
            rows = expressed[codes == code]
            measured[code] |= np.asarray(rows.sum(0) if sp.issparse(rows) else rows.any(0)).ravel() > 0
    return torch.from_numpy(measured)


def refuse_scvi_covariates(kwargs: dict) -> None:
    """ScVI's ``batch_key``/``labels_key`` (and covariate keys) have no meaning here: say what to use instead."""
    hints = {
        "batch_key": "pass donors as `donor_key`, and studies or technologies as `dataset_key` (PB-Cond's groups)",
        "labels_key": "the model is unsupervised; keep labels in `adata.obs` for evaluation",
        "categorical_covariate_keys": "pass donors as `donor_key` and studies as `dataset_key`",
        "continuous_covariate_keys": "continuous covariates are not modelled",
        "size_factor_key": "the likelihood uses each cell's observed total",
    }
    for argument, hint in hints.items():
        if kwargs.get(argument) is not None:
            raise ValueError(
                f"SCTrilemma.setup_anndata has no `{argument}` (got {kwargs[argument]!r}): {hint}. "
                "See the 'Coming from scVI' page of the user guide."
            )


def training_split(
    n_expressed: np.ndarray,
    train_size: float | None,
    validation_size: float | None,
    min_expressed_genes: int,
    seed: int,
) -> list[np.ndarray]:
    """Seeded train/validation/test indices of cells with ``n_expressed`` genes each.

    Cells with fewer than ``min_expressed_genes`` go to the test split.
    """
    eligible = np.flatnonzero(n_expressed >= min_expressed_genes)
    if eligible.size == 0:
        raise ValueError(
            f"No cell has at least {min_expressed_genes} expressed genes; nothing to train on. "
            "Check that the registered matrix holds raw counts."
        )
    if eligible.size < n_expressed.size:
        logger.info(
            "Leaving %d cells with fewer than %d expressed genes out of training.",
            n_expressed.size - eligible.size,
            min_expressed_genes,
        )
    train_fraction = 0.9 if train_size is None else float(train_size)
    validation_fraction = 1.0 - train_fraction if validation_size is None else float(validation_size)
    if not 0 < train_fraction <= 1 or validation_fraction < 0 or train_fraction + validation_fraction > 1 + 1e-9:
        raise ValueError(
            f"Invalid split: train_size={train_size}, validation_size={validation_size}; "
            "need 0 < train_size <= 1 and train_size + validation_size <= 1."
        )
    shuffled = np.random.default_rng(seed).permutation(eligible)
    n_train = max(1, math.ceil(train_fraction * shuffled.size))
    n_validation = min(shuffled.size - n_train, math.floor(validation_fraction * shuffled.size))
    rest = np.setdiff1d(np.arange(n_expressed.size), shuffled[: n_train + n_validation])
    return [np.sort(shuffled[:n_train]), np.sort(shuffled[n_train : n_train + n_validation]), rest]


def check_cells_have_counts(manager: AnnDataManager, indices: Sequence[int] | None) -> None:
    """Refuse requested cells (all with ``None``) without counts; minified data, whose posteriors are cached, passes."""
    if REGISTRY_KEYS.LATENT_QZM_KEY in manager.data_registry:
        return  # minified data: the encoder does not run
    matrix = manager.get_from_registry(REGISTRY_KEYS.X_KEY)
    names = manager.adata.obs_names
    if indices is not None:
        order = np.sort(np.asarray(indices))
        matrix, names = matrix[order], names[order]
    check_no_empty_cells(matrix, names, where="the requested data")
