"""A query AnnData in a reference's gene space (the work behind ``prepare_query_anndata``)."""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING

import anndata as ad
import numpy as np
import pandas as pd
from scvi import settings

from sctrilemma._validation import (
    cell_statistics,
    check_obs_keys,
    check_unique_var_names,
    refuse_empty_cells,
    scan_counts,
)
from sctrilemma.data._genes import find_symbol_column, match_genes

if TYPE_CHECKING:
    from scvi.model.base import BaseModelClass

logger = logging.getLogger(__name__)

MEASURED_COLUMN = "measured"
GENE_MATCH_KEY = "sctrilemma_gene_match"
UNKNOWN_GROUP = "unknown"
# A query measuring less than this share of the genes the reference's encoder reads is warned about.
MIN_ENCODER_GENE_SHARE = 0.5


def project_query(
    adata: ad.AnnData,
    model: BaseModelClass,
    layer: str | None = None,
    donor_key: str | None = None,
    dataset_key: str | None = None,
    min_overlap: float = 0.5,
) -> ad.AnnData:
    """A new in-memory AnnData ``(n_obs, n_reference_genes)`` with ``adata``'s counts in ``model``'s genes.

    ``adata`` is read in row chunks (a backed AnnData is never loaded whole) and left unchanged. The
    arguments are :meth:`~sctrilemma.SCTrilemma.prepare_query_anndata`'s.

    Raises
    ------
    ValueError
        For duplicated gene names, missing donor/dataset values, too few of the model's genes, counts that
        are not raw counts or cells without counts, before the counts are mapped.
    """
    setup_args = model.registry_["setup_args"]
    reference_layer = setup_args.get("layer") or setup_args.get("rna_layer")
    if layer is None and reference_layer is not None and reference_layer in adata.layers:
        layer = reference_layer
    counts = adata.X if layer is None else adata.layers[layer]
    where = "adata.X" if layer is None else f"adata.layers[{layer!r}]"
    check_obs_keys(adata.obs, {"donor_key": donor_key, "dataset_key": dataset_key})
    sources = _group_sources(adata.obs, setup_args, {"donor_key": donor_key, "dataset_key": dataset_key})
    check_obs_keys(adata.obs, {argument: source for argument, (_, source) in sources.items()})  # implicit columns
    check_unique_var_names(adata.var_names, adata.var, where="query")
    symbol_column = find_symbol_column(adata.var)
    match = match_genes(
        adata.var_names,
        model.gene_names_,
        query_symbols=None if symbol_column is None else adata.var[symbol_column].astype(str).to_numpy(),
        vocabulary_symbols=model.gene_symbols_,
        min_fraction=min_overlap,
    )
    summary = scan_counts(counts, where=where)
    refuse_empty_cells(summary.cell_totals, adata.obs_names, where=where)
    projected = match.project(counts, model.gene_names_.size)
    var = pd.DataFrame(index=pd.Index(model.gene_names_.astype(str)))
    if model.gene_symbols_ is not None:
        var["gene_symbol"] = model.gene_symbols_.astype(str)
    var[MEASURED_COLUMN] = np.isin(np.arange(var.shape[0]), match.vocab_index)
    query = ad.AnnData(X=projected, obs=adata.obs.copy(), var=var)
    if reference_layer is not None:
        query.layers[reference_layer] = projected.copy()
    for column, source in sources.values():
        if source is not None:
            query.obs[column] = query.obs[source].astype(str).to_numpy()  # no missing values: checked above
        else:
            logger.info("The query has no %r column; its cells form one %r group.", column, UNKNOWN_GROUP)
            query.obs[column] = UNKNOWN_GROUP
    query.uns[GENE_MATCH_KEY] = {
        "by": match.by,
        "n_query_genes": match.n_query,
        "n_matched": match.n_matched,
        "n_model_genes_found": match.n_found,
        "model_gene_fraction": match.vocabulary_fraction,
    }
    return query


def _group_sources(
    obs: pd.DataFrame, setup_args: dict, query_keys: dict[str, str | None]
) -> dict[str, tuple[str, str | None]]:
    """For each donor/dataset column of the reference: its name and the query column that fills it (or ``None``).

    A query column passed as ``donor_key``/``dataset_key`` is used; otherwise a column named like the
    reference's, when there is one.
    """
    sources = {}
    for argument, query_column in query_keys.items():
        column = setup_args.get(argument)
        if column is None:
            continue
        source = query_column or column
        sources[argument] = (column, source if source in obs.columns else None)
    return sources


def cells_without_reference_counts(query: ad.AnnData) -> np.ndarray:
    """Positions of a prepared query's cells with no counts in the reference's genes, ``(n_empty,)``."""
    totals, _ = cell_statistics(query.X)  # chunked: a prepared query may have been written and read back backed
    return np.flatnonzero(totals == 0)


def empty_after_matching_message(query: ad.AnnData, empty: np.ndarray, filtered: str) -> str:
    """Why cells of a query became empty in the reference's genes, and how to remove them from ``filtered``."""
    examples = ", ".join(map(repr, query.obs_names[empty[:3]].astype(str)))
    return (
        f"{empty.size} of {query.n_obs} query cells have counts only in genes the reference does not know "
        f"({examples}{', ...' if empty.size > 3 else ''}), so they have nothing to embed. Remove them from the "
        f"prepared query with `sc.pp.filter_cells({filtered}, min_counts=1)`"
    )


def replace_contents(adata: ad.AnnData, query: ad.AnnData) -> None:
    """Make ``adata`` the prepared ``query`` in place; a backed ``adata`` becomes in-memory, its file untouched."""
    if adata.isbacked:
        adata.file.close()
    adata._init_as_actual(query)


def warn_if_few_encoder_genes(encoder_reads: np.ndarray, query: ad.AnnData, gene_panel_min_fraction: float) -> None:
    """Warn when a prepared ``query`` measures less than half of the genes the reference's encoder reads.

    ``encoder_reads`` ``(n_reference_genes,)`` is the reference's ``encoder_gene_mask`` (its most variable genes, or
    every gene). The encoder embeds a query from the genes it reads that the query measured; reading the query's
    other genes instead does not help, since the encoder was trained on its own (``benchmarks/zero_shot.py``). A
    reference trained with genes hidden from its encoder
    (``gene_panel_min_fraction`` below 1) learnt to embed cells from part of its genes, and is not warned about.
    """
    if gene_panel_min_fraction < 1.0 or MEASURED_COLUMN not in query.var:
        return
    measured = query.var[MEASURED_COLUMN].to_numpy(dtype=bool)
    n_reads, n_measured = int(encoder_reads.sum()), int((encoder_reads & measured).sum())
    if n_measured >= MIN_ENCODER_GENE_SHARE * n_reads:
        return
    which = "every gene of its training data" if encoder_reads.all() else "the most variable genes of its training data"
    warnings.warn(
        f"The query measures {n_measured} of the {n_reads} genes the reference's encoder reads ({which}), so its "
        "cells are embedded from those alone. Where that loses cell identity, a reference whose encoder reads every "
        "gene with a random share hidden in training (`SCTrilemma(reference, preset='small', encoder_genes='all', "
        "gene_panel_min_fraction=0.1)`) can do better; see the user guide, 'References from several studies'.",
        UserWarning,
        stacklevel=settings.warnings_stacklevel,
    )
