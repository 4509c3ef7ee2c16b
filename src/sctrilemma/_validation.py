"""Input checks at the API boundary: every failure names the problem and the fix."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    import anndata as ad
    import pandas as pd

ROW_CHUNK = 4096


def iter_row_chunks(matrix, chunk_size: int = ROW_CHUNK) -> Iterator[np.ndarray | sp.csr_matrix]:
    """Yield consecutive row blocks of a dense, sparse or backed matrix, each in memory."""
    n_rows = matrix.shape[0]
    for start in range(0, n_rows, chunk_size):
        block = matrix[start : min(start + chunk_size, n_rows)]
        yield block.tocsr() if sp.issparse(block) else np.asarray(block)


def _values(block: np.ndarray | sp.spmatrix) -> np.ndarray:
    return block.data if sp.issparse(block) else np.asarray(block).ravel()


def check_counts(matrix, *, where: str) -> None:
    """Raise a ``ValueError`` unless ``matrix`` holds finite, non-negative integer counts.

    Parameters
    ----------
    matrix
        Cells x genes, dense, sparse or backed.
    where
        How the user refers to the matrix (e.g. ``"adata.X"``), used in the messages.
    """
    if matrix.shape[1] == 0:
        raise ValueError(f"{where} has no genes (0 columns). Pass an AnnData with the measured genes as variables.")
    if matrix.shape[0] == 0:
        raise ValueError(f"{where} has no cells (0 rows).")
    for block in iter_row_chunks(matrix):
        values = _values(block)
        if values.dtype.kind not in "biuf":
            raise ValueError(f"{where} has dtype {values.dtype}; raw counts must be numeric.")
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            raise ValueError(
                f"{where} contains NaN or infinite values. Pass raw integer counts (e.g. `layer='counts'`) "
                "or remove the affected cells and genes."
            )
        if (values < 0).any():
            raise ValueError(
                f"{where} contains negative values (min {values.min():.3g}); it looks scaled or centred. "
                "sctrilemma needs raw counts: pass the layer that holds them, e.g. `layer='counts'`."
            )
        if values.dtype.kind == "f":
            fractional = values[values != np.round(values)]
            if fractional.size:
                raise ValueError(
                    f"{where} contains non-integer values (e.g. {fractional[0]:.4g}); it looks normalised or "
                    "log-transformed. sctrilemma models raw UMI/read counts: pass them with `layer='counts'` "
                    "(keep a copy with `adata.layers['counts'] = adata.X.copy()` before `sc.pp.normalize_total`)."
                )


def check_obs_keys(obs: pd.DataFrame, keys: Mapping[str, str | None], *, where: str = "adata.obs") -> None:
    """Raise a ``ValueError`` if a given obs column is missing or has missing values.

    ``keys`` maps argument names (e.g. ``"donor_key"``) to column names or ``None``.
    """
    for argument, column in keys.items():
        if column is None:
            continue
        if column not in obs.columns:
            available = ", ".join(map(repr, list(obs.columns)[:20])) or "none"
            raise ValueError(f"`{argument}={column!r}` is not a column of {where}; available columns: {available}.")
        n_missing = int(obs[column].isna().sum())
        if n_missing:
            raise ValueError(
                f"{where}[{column!r}] (`{argument}`) has {n_missing} missing values. Fill them "
                f"(e.g. `{where}[{column!r}] = {where}[{column!r}].astype(str)`) or drop those cells."
            )


def cell_statistics(matrix) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell raw totals and numbers of expressed genes, each ``(n_cells,)``, computed chunk-wise."""
    totals, expressed = [], []
    for block in iter_row_chunks(matrix):
        totals.append(np.asarray(block.sum(axis=1)).ravel())
        expressed.append(np.asarray((block > 0).sum(axis=1)).ravel())
    return np.concatenate(totals).astype(np.float64), np.concatenate(expressed).astype(np.int64)


def check_no_empty_cells(matrix, obs_names: pd.Index, *, where: str) -> None:
    """Raise a ``ValueError`` naming the cells of ``matrix`` that have no counts at all."""
    totals, _ = cell_statistics(matrix)
    empty = np.flatnonzero(totals == 0)
    if empty.size:
        examples = ", ".join(map(repr, obs_names[empty[:3]]))
        raise ValueError(
            f"{empty.size} cells in {where} have no counts ({examples}, ...); they cannot be embedded. "
            "Remove them first, e.g. `sc.pp.filter_cells(adata, min_genes=5)`."
        )


def registered_matrix_name(adata: ad.AnnData, layer: str | None, modality: str | None = None) -> str:
    """How the user refers to the registered count matrix, for messages."""
    base = "adata" if modality is None else f"mdata.mod[{modality!r}]"
    return f"{base}.X" if layer is None else f"{base}.layers[{layer!r}]"


def check_unique_var_names(var_names: pd.Index, var: pd.DataFrame, *, where: str) -> None:
    """Raise a ``ValueError`` naming a few duplicated gene names and the fix.

    Parameters
    ----------
    var_names
        The gene names (``adata.var_names``).
    var
        ``adata.var``: a column with unique values (e.g. Ensembl IDs) is suggested as ``var_names``.
    where
        How the user refers to the AnnData (e.g. ``"adata"``), used in the message.
    """
    if var_names.is_unique:
        return
    duplicated = var_names[var_names.duplicated()].unique()
    examples = ", ".join(map(repr, duplicated[:5]))
    id_column = _unique_id_column(var)
    use_ids = (
        f", or use the unique IDs as names: `{where}.var_names = {where}.var[{id_column!r}].astype(str)`"
        if id_column is not None
        else ", or use unique gene IDs (e.g. Ensembl IDs) as var_names"
    )
    raise ValueError(
        f"{where}.var_names has {duplicated.size} duplicated gene names ({examples}"
        f"{', ...' if duplicated.size > 5 else ''}); each gene must be a separate token. "
        f"Make them unique with `{where}.var_names_make_unique()`{use_ids}."
    )


def _unique_id_column(var: pd.DataFrame) -> str | None:
    """A ``var`` column named like gene IDs (``gene_ids``, ``ensembl_id``, ...) whose values are all set and unique."""
    for column in var.columns:
        name = str(column).lower()
        if ("id" in name or "ensembl" in name) and var[column].notna().all() and var[column].astype(str).is_unique:
            return str(column)
    return None


def warn_low_expression_cells(matrix, *, where: str, min_genes: int, stacklevel: int = 2) -> None:
    """Warn how many cells have fewer than ``min_genes`` expressed genes and what happens to them.

    Such cells are not trained on; cells without any counts also cannot be embedded.
    """
    _, expressed = cell_statistics(matrix)
    n_low = int((expressed < min_genes).sum())
    if n_low == 0:
        return
    n_empty = int((expressed == 0).sum())
    empty = f"; {n_empty} have no counts at all and cannot be embedded" if n_empty else ""
    warnings.warn(
        f"{n_low} of {expressed.size} cells in {where} have fewer than {min_genes} expressed genes: `train` leaves "
        f"them out{empty}. Remove them first with `sc.pp.filter_cells(adata, min_genes={min_genes})`.",
        UserWarning,
        stacklevel=stacklevel,
    )
