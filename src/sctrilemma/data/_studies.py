"""Several studies' counts in one AnnData over the union of their genes, for training a multi-study reference."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp

from sctrilemma.data._genes import _ENSEMBL, GeneMatch, find_symbol_column, strip_version

if TYPE_CHECKING:
    from collections.abc import Mapping

SYMBOL_COLUMN = "gene_symbol"


def _symbols_and_ids(adata: ad.AnnData) -> tuple[np.ndarray, np.ndarray]:
    """Each gene's symbol (upper case) and Ensembl ID (``""`` where the study gives none)."""
    names = strip_version(adata.var_names)
    column = find_symbol_column(adata.var)
    if column is None:
        looks_ensembl = np.array([bool(_ENSEMBL.match(n)) for n in names])
        if looks_ensembl.mean() > 0.5:
            raise ValueError(
                "A study names its genes by Ensembl ID but has no symbol column (e.g. `var['gene_symbol']`): "
                "add symbols, so that its genes can be matched to the other studies'."
            )
        return np.char.upper(names.astype(str)), np.full(names.size, "", dtype=object)
    symbols = adata.var[column].astype(str).str.upper().to_numpy()
    ids = np.where([bool(_ENSEMBL.match(n)) for n in names], names, "")
    return symbols, ids


def concat_studies(studies: Mapping[str, ad.AnnData], study_key: str = "study") -> ad.AnnData:
    """One AnnData of raw counts from several studies, over the union of their genes.

    Genes are matched by symbol (case-insensitive); genes with the same symbol within one study are summed.
    ``var_names`` are Ensembl IDs where a study gives one and symbols otherwise, ``var["gene_symbol"]`` always
    holds the symbol, so queries named either way match the genes. Genes that no cell expresses are dropped.
    Train with ``setup_anndata(..., dataset_key=study_key)``: the zeros of genes a study did not measure are
    then not taken as measurements.

    Parameters
    ----------
    studies
        Study name to an AnnData of raw counts in ``X``.
    study_key
        ``obs`` column of the result naming each cell's study.

    Returns
    -------
    A new AnnData (CSR float32 counts); ``obs`` is the union of the studies' columns, with ``study_key``.
    """
    if len(studies) < 1:
        raise ValueError("`studies` is empty: pass a mapping of study names to AnnData objects.")
    parts = {name: _symbols_and_ids(adata) for name, adata in studies.items()}
    symbols = pd.Index(sorted(set().union(*(set(s) for s, _ in parts.values()))))
    ids = pd.Series("", index=symbols, dtype=object)
    for study_symbols, study_ids in parts.values():
        known = study_ids != ""
        ids.loc[study_symbols[known]] = study_ids[known]
    matrices, obs = [], []
    for name, adata in studies.items():
        study_symbols, _ = parts[name]
        every_gene = np.arange(study_symbols.size)
        match = GeneMatch(every_gene, symbols.get_indexer(study_symbols), "symbol", study_symbols.size, 1.0)
        matrices.append(match.project(adata.X, symbols.size))
        frame = adata.obs.copy()
        frame[study_key] = name
        frame.index = frame.index.astype(str)
        obs.append(frame)
    matrix = sp.vstack(matrices, format="csr")
    expressed = np.asarray((matrix > 0).sum(0)).ravel() > 0
    var_names = np.where(ids.to_numpy() != "", ids.to_numpy(), symbols.to_numpy())[expressed]
    var = pd.DataFrame({SYMBOL_COLUMN: symbols.to_numpy()[expressed]}, index=pd.Index(var_names.astype(str)))
    obs_frame = pd.concat(obs, axis=0, join="outer")
    obs_frame[study_key] = pd.Categorical(obs_frame[study_key], categories=list(studies))
    if not obs_frame.index.is_unique:
        obs_frame.index = [f"{study}-{cell}" for study, cell in zip(obs_frame[study_key], obs_frame.index, strict=True)]
    return ad.AnnData(X=matrix[:, expressed], obs=obs_frame, var=var)
