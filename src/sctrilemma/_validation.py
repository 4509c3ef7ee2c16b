"""Input checks at the API boundary: every failure names the problem and the fix."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pandas as pd
import scipy.sparse as sp

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    import anndata as ad

ROW_CHUNK = 4096


def iter_row_chunks(matrix, chunk_size: int | None = None) -> Iterator[np.ndarray | sp.csr_matrix]:
    """Yield consecutive row blocks of a dense, sparse or backed matrix, each in memory.

    ``chunk_size`` rows at a time; :data:`ROW_CHUNK` (read at each call) when ``None``.
    """
    n_rows = matrix.shape[0]
    chunk_size = ROW_CHUNK if chunk_size is None else chunk_size
    for start in range(0, n_rows, chunk_size):
        block = matrix[start : min(start + chunk_size, n_rows)]
        yield block.tocsr() if sp.issparse(block) else np.asarray(block)


def _values(block: np.ndarray | sp.spmatrix) -> np.ndarray:
    return block.data if sp.issparse(block) else np.asarray(block).ravel()


class CountSummary(NamedTuple):
    """Per-cell and per-gene totals of a count matrix, from one chunked pass."""

    cell_totals: np.ndarray
    """Total counts of each cell, ``(n_cells,)``."""
    cell_genes: np.ndarray
    """Expressed (non-zero) genes of each cell, ``(n_cells,)``."""
    gene_totals: np.ndarray
    """Total counts of each gene, ``(n_genes,)``."""


def check_counts(matrix, *, where: str) -> None:
    """Raise a ``ValueError`` unless ``matrix`` holds finite, non-negative integer counts.

    Parameters
    ----------
    matrix
        Cells x genes, dense, sparse or backed.
    where
        How the user refers to the matrix (e.g. ``"adata.X"``), used in the messages.
    """
    _check_shape(matrix, where)
    for block in iter_row_chunks(matrix):
        _check_count_values(_values(block), where)


def scan_counts(matrix, *, where: str) -> CountSummary:
    """:func:`check_counts` and the matrix's totals in one pass over row chunks (backed matrices included).

    Parameters
    ----------
    matrix
        Cells x genes, dense, sparse or backed.
    where
        How the user refers to the matrix (e.g. ``"adata.X"``), used in the messages.

    Returns
    -------
    The per-cell and per-gene totals.
    """
    _check_shape(matrix, where)
    cell_totals, cell_genes = [], []
    gene_totals = np.zeros(matrix.shape[1], dtype=np.float64)
    for block in iter_row_chunks(matrix):
        _check_count_values(_values(block), where)
        totals, expressed = _block_cell_statistics(block)
        cell_totals.append(totals)
        cell_genes.append(expressed)
        gene_totals += np.asarray(block.sum(axis=0), dtype=np.float64).ravel()
    return CountSummary(np.concatenate(cell_totals), np.concatenate(cell_genes), gene_totals)


def _block_cell_statistics(block: np.ndarray | sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """Each row's total (float64) and number of non-zero entries (int64)."""
    totals = np.asarray(block.sum(axis=1), dtype=np.float64).ravel()
    return totals, np.asarray((block > 0).sum(axis=1)).ravel().astype(np.int64)


def _check_shape(matrix, where: str) -> None:
    if matrix.shape[1] == 0:
        raise ValueError(f"{where} has no genes (0 columns). Pass an AnnData with the measured genes as variables.")
    if matrix.shape[0] == 0:
        raise ValueError(f"{where} has no cells (0 rows).")


def _check_count_values(values: np.ndarray, where: str) -> None:
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
                f"{where}[{column!r}] (`{argument}`) has {n_missing} missing values. "
                f"{_missing_values_fix(obs[column], where, column)}"
            )


def _missing_values_fix(values: pd.Series, where: str, column: str, label: str = "unknown") -> str:
    """Code that drops the cells with a missing value or labels them explicitly (``astype(str)`` would make "nan")."""
    selected = f"{where}[{column!r}]"
    categorical = isinstance(values.dtype, pd.CategoricalDtype)
    present = values.cat.categories if categorical else values.dropna()
    if not all(isinstance(value, str) for value in present):  # numbers and a string label do not sort together
        fill = f"{selected} = {selected}.astype('string').fillna({label!r})"
    elif categorical and label not in present:
        fill = f"{selected} = {selected}.cat.add_categories({label!r}).fillna({label!r})"
    else:
        fill = f"{selected} = {selected}.fillna({label!r})"
    fill = f"label them explicitly, which makes them one group: `{fill}`"
    if not where.endswith(".obs") or "[" in where:  # a MuData modality: dropping cells there desynchronises the MuData
        return f"Remove those cells, or {fill}."
    data = where.removesuffix(".obs")
    return f"Drop those cells: `{data} = {data}[{selected}.notna()].copy()`, or {fill}."


def cell_statistics(matrix) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell raw totals and numbers of expressed genes, each ``(n_cells,)``, computed chunk-wise."""
    totals, expressed = zip(*(_block_cell_statistics(block) for block in iter_row_chunks(matrix)), strict=True)
    return np.concatenate(totals), np.concatenate(expressed)


def check_no_empty_cells(matrix, obs_names: pd.Index, *, where: str) -> None:
    """Raise a ``ValueError`` naming the cells of ``matrix`` that have no counts at all."""
    totals, _ = cell_statistics(matrix)
    refuse_empty_cells(totals, obs_names, where=where)


def refuse_empty_cells(cell_totals: np.ndarray, obs_names: pd.Index, *, where: str, fix: str | None = None) -> None:
    """Raise a ``ValueError`` if any cell has no counts: the encoder has no expressed gene to read for it.

    Parameters
    ----------
    cell_totals
        Total counts of each cell, ``(n_cells,)``.
    obs_names
        The cells' names, for the message.
    where
        How the user refers to the matrix (e.g. ``"adata.X"``).
    fix
        How to remove the cells; by default code for ``where`` from :func:`empty_cells_fix`.
    """
    empty = np.flatnonzero(np.asarray(cell_totals) == 0)
    if empty.size == 0:
        return
    examples = ", ".join(map(repr, obs_names[empty[:3]].astype(str)))
    fix = fix or empty_cells_fix(where)
    raise ValueError(
        f"{empty.size} of {len(cell_totals)} cells in {where} have no counts ({examples}"
        f"{', ...' if empty.size > 3 else ''}): with no expressed gene to read they can be neither trained on "
        f"nor embedded. Remove them first, e.g. {fix}."
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


def empty_cells_fix(where: str) -> str:
    """Code that removes the cells without counts in the matrix ``where`` names (see :func:`registered_matrix_name`)."""
    if where.startswith("adata.layers["):
        return f"`adata = adata[np.asarray({where}.sum(axis=1)).ravel() > 0].copy()`"
    if where.startswith("mdata.mod["):
        modality = where[: where.index("]") + 1]
        empty = f"{modality}.obs_names[np.asarray({where}.sum(axis=1)).ravel() == 0]"
        return f"`mdata = mdata[~mdata.obs_names.isin({empty})].copy()`"
    return "`sc.pp.filter_cells(adata, min_counts=1)`"


def check_cell_expression(
    matrix, obs_names: pd.Index, *, where: str, min_genes: int, fix: str | None = None, stacklevel: int = 2
) -> None:
    """Check raw counts, refuse cells without counts and warn about cells with fewer than ``min_genes`` genes.

    Cells with fewer than ``min_genes`` expressed genes are not trained on; cells without any counts
    cannot be embedded, so they are refused before any training is spent.

    Parameters
    ----------
    matrix
        Cells x genes, dense, sparse or backed.
    obs_names
        The cells' names, for the message.
    where
        How the user refers to the matrix (e.g. ``"adata.X"``).
    min_genes
        Fewest expressed genes a cell is trained with.
    fix
        How to remove cells without counts; by default code for ``where`` from :func:`empty_cells_fix`.
    stacklevel
        Where the warning points.
    """
    summary = scan_counts(matrix, where=where)
    refuse_empty_cells(summary.cell_totals, obs_names, where=where, fix=fix)
    n_low = int((summary.cell_genes < min_genes).sum())
    if n_low == 0:
        return
    warnings.warn(
        f"{n_low} of {summary.cell_genes.size} cells in {where} have fewer than {min_genes} expressed genes: "
        f"`train` leaves them out. Remove them first with `sc.pp.filter_cells(adata, min_genes={min_genes})`.",
        UserWarning,
        stacklevel=stacklevel,
    )
