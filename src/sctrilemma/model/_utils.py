"""Small helpers shared by the model's mixins."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sctrilemma.data._genes import find_symbol_column

if TYPE_CHECKING:
    from anndata import AnnData
    from mudata import MuData


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


def refuse_scvi_covariates(kwargs: dict) -> None:
    """scVI's ``batch_key``/``labels_key`` (and covariate keys) have no meaning here: say what to use instead."""
    hints = {
        "batch_key": "pass the column as `donor_key` (PB-Cond's groups; add `dataset_key` for studies)",
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
