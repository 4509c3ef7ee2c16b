"""Checks of the command line's paths and files, before anything heavy is imported or read (standard library only)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import anndata as ad

EMBEDDING_KEY = "X_sctrilemma"
MODEL_FILE = "model.safetensors"
LEGACY_MODEL_FILES = ("model.pt",)
# HDF5 files start with this signature at offset 0 (or 512, 1024, ... after a user block).
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
H5AD_EXPECTED = "expected an AnnData .h5ad file (write one with `adata.write_h5ad(path)`)"
MODEL_EXPECTED = f"expected a directory with {MODEL_FILE} written by `sctrilemma train --out`"
# `train --max-time` without --max-epochs/--max-steps: epochs enough that the clock always ends training first.
TIME_BUDGET_MAX_EPOCHS = 10_000
MAX_LISTED_COLUMNS = 30


class CommandError(Exception):
    """A problem with the command line or its files; reported as one line, exit status 2."""


# ---------------------------------------------------------------------- path checks (standard library only)
def _has_hdf5_signature(path: Path) -> bool:
    size = path.stat().st_size
    with path.open("rb") as stream:
        offset = 0
        while offset + len(HDF5_SIGNATURE) <= size and offset <= 2**30:
            stream.seek(offset)
            if stream.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
                return True
            offset = 512 if offset == 0 else 2 * offset
    return False


def check_readable_file(path: str, what: str, expected: str) -> Path:
    """``path`` as a ``Path`` if it is an existing, readable file; otherwise a ``CommandError``."""
    file = Path(path)
    if not file.exists():
        raise CommandError(f"{what} {path} does not exist; {expected}.")
    if file.is_dir():
        raise CommandError(f"{what} {path} is a directory; {expected}.")
    try:
        with file.open("rb"):
            pass
    except OSError as error:
        raise CommandError(f"{what} {path} cannot be read ({error.strerror or error}); {expected}.") from error
    return file


def check_h5ad(path: str, what: str = "input file") -> Path:
    """Check that ``path`` is a readable HDF5 file, without importing h5py or anndata."""
    file = check_readable_file(path, what, H5AD_EXPECTED)
    try:
        is_hdf5 = _has_hdf5_signature(file)
    except OSError as error:
        raise CommandError(f"{what} {path} cannot be read ({error.strerror or error}); {H5AD_EXPECTED}.") from error
    if not is_hdf5:
        raise CommandError(f"{what} {path} is not an HDF5/.h5ad file (no HDF5 signature); {H5AD_EXPECTED}.")
    return file


# References shipped with the package, by the name `--model` and `--pretrained` accept (as sctrilemma.data gives them).
SHIPPED_REFERENCES = {
    "blood": Path(__file__).parent / "data" / "blood_reference",
    "example": Path(__file__).parent / "data" / "reference",
}


def check_model_dir(path: str, option: str = "--model") -> Path:
    """Check that ``path`` is a directory holding a saved model (or a legacy file that ``load`` explains).

    A path to the model file itself (``model_dir/model.safetensors``) means its directory; the name of a shipped
    reference (``blood``, ``example``) that is not a local path means that reference.
    """
    directory = Path(path)
    if path in SHIPPED_REFERENCES and not directory.exists():
        directory = SHIPPED_REFERENCES[path]
    if directory.is_file() and directory.name in (MODEL_FILE, *LEGACY_MODEL_FILES):
        directory = directory.parent
    if not directory.exists():
        raise CommandError(f"{option} {path} does not exist; {MODEL_EXPECTED}.")
    if not directory.is_dir():
        raise CommandError(f"{option} {path} is a file, not a directory; {MODEL_EXPECTED}.")
    if not any((directory / name).is_file() for name in (MODEL_FILE, *LEGACY_MODEL_FILES)):
        raise CommandError(f"{option} {path} is not a saved sctrilemma model (no {MODEL_FILE}); {MODEL_EXPECTED}.")
    return directory


def check_model_out(path: str, overwrite: bool) -> Path:
    """Check ``train --out`` before training: a directory that does not already hold a model (or ``--overwrite``)."""
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise CommandError(f"--out {path} is a file; pass a directory for the trained model.")
    saved = [name for name in (MODEL_FILE, *LEGACY_MODEL_FILES) if (directory / name).exists()]
    if saved and not overwrite:
        raise CommandError(
            f"--out {path} already holds a saved model ({saved[0]}); pass --overwrite to replace it "
            "or choose another --out directory."
        )
    return directory


def check_dir_out(path: str) -> Path:
    """Check an output directory argument: it may exist, but not as a file."""
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise CommandError(f"--out {path} is a file; pass a directory for the outputs.")
    return directory


def check_file_out(path: str) -> Path:
    """Check an output file argument: not a directory, in an existing, writable directory."""
    file = Path(path)
    if file.is_dir():
        raise CommandError(f"--out {path} is a directory; pass a file name such as embedded.h5ad.")
    parent = file.parent if str(file.parent) else Path()
    if not parent.is_dir():
        raise CommandError(f"--out {path}: the directory {parent} does not exist; create it first.")
    if not os.access(parent, os.W_OK):
        raise CommandError(f"--out {path}: the directory {parent} is not writable.")
    return file


def _unreadable(path: Path, what: str, error: Exception) -> CommandError:
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return CommandError(
        f"{what} {path} could not be read as AnnData (corrupt or truncated?): {reason}; {H5AD_EXPECTED}."
    )


def read_h5ad(path: Path, what: str = "input file") -> ad.AnnData:
    """Read an .h5ad checked by :func:`check_h5ad`; a damaged file becomes a one-line ``CommandError``."""
    import anndata as ad

    try:
        return ad.read_h5ad(path)
    except MemoryError:
        raise
    except Exception as error:  # any other failure to parse the file is the file's problem (chained below)
        raise _unreadable(path, what, error) from error


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def h5ad_columns(path: Path, group: str = "obs", what: str = "input file") -> list[str] | None:
    """Column names of an .h5ad's ``obs`` (or ``var``) table, from its metadata only (h5py; no X, no anndata).

    anndata >= 0.7 writes the table as a group whose ``column-order`` attribute lists the columns (``_index`` names
    the index member); anndata < 0.7 wrote one compound dataset whose fields are ``index`` and the columns.

    Parameters
    ----------
    path
        An .h5ad checked by :func:`check_h5ad`.
    group
        ``"obs"`` or ``"var"``.
    what
        How error messages name the file.

    Returns
    -------
    The column names, or ``None`` for a layout not known here (the full read checks the keys then).
    """
    import h5py

    try:
        with h5py.File(path, "r") as file:
            table = file.get(group)
            if isinstance(table, h5py.Dataset) and table.dtype.names:
                return [name for name in table.dtype.names if name != "index"]
            if not isinstance(table, h5py.Group):
                return None
            order = table.attrs.get("column-order")
            if order is None:  # written by another tool: every member but the index and anndata 0.7's categories
                index = _text(table.attrs.get("_index", "_index"))
                return [name for name in table if name not in (index, "__categories")]
            return [_text(order)] if isinstance(order, str | bytes) else [_text(name) for name in order]
    except MemoryError:
        raise
    except Exception as error:  # h5py's errors on a damaged file (OSError, KeyError, ...) are the file's problem
        raise _unreadable(path, what, error) from error


def check_h5ad_keys(path: Path, keys: dict[str, str | None], group: str = "obs", what: str = "input file") -> None:
    """Check that each ``--option KEY`` in ``keys`` (``None`` skipped) names a column of the file's ``group`` table.

    Done with :func:`h5ad_columns` before anything heavy is imported or read, so a typo is reported at once.
    """
    wanted = {option: key for option, key in keys.items() if key is not None}
    columns = h5ad_columns(path, group, what) if wanted else None
    if columns is None:
        return
    for option, key in wanted.items():
        if key in columns:
            continue
        close = difflib.get_close_matches(key, columns, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        listed = ", ".join(columns[:MAX_LISTED_COLUMNS]) or "none"
        more = f" (and {len(columns) - MAX_LISTED_COLUMNS} more)" if len(columns) > MAX_LISTED_COLUMNS else ""
        raise CommandError(
            f"{option} {key!r} is not a column of .{group} in {what} {path}; {hint}available columns: {listed}{more}."
        )
