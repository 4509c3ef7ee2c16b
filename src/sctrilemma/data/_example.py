"""The small real example dataset shipped with sctrilemma."""

from __future__ import annotations

from pathlib import Path

import anndata as ad

EXAMPLE_DIR = Path(__file__).parent / "example"
EXAMPLE_FILE = EXAMPLE_DIR / "kang2018_pbmc_example.h5ad"
EXAMPLE_REFERENCE_DIR = Path(__file__).parent / "reference"
REFERENCE_DONORS = ("1015", "1016", "1244")
HELD_OUT_DONORS = ("1256", "1488")


def load_example() -> ad.AnnData:
    """Load 3,000 control PBMCs from 5 donors of :cite:t:`kang2018` (raw counts, 2,511 genes).

    600 cells per donor, subsampled with a fixed seed from the authors' control lane; ``var_names``
    are Ensembl IDs with symbols in ``var["gene_symbol"]``; ``obs`` has ``donor``, ``cell_type``,
    ``condition`` and ``batch``. Provenance: ``PROVENANCE.md`` next to the file. Nothing is downloaded.

    Returns
    -------
    A new AnnData of ``3000 x 2511`` raw integer counts (CSR) on each call.
    """
    return ad.read_h5ad(EXAMPLE_FILE)


def example_reference_dir() -> Path:
    """Directory of the small pretrained reference shipped with sctrilemma.

    A ``preset="small"`` model trained on donors 1015, 1016 and 1244 of :func:`load_example` by
    ``scripts/train_example_reference.py``; donors 1256 and 1488 were never seen and serve as
    zero-shot queries. Load it with ``SCTrilemma.load(example_reference_dir())`` or pass it to
    :meth:`~sctrilemma.SCTrilemma.load_query_data`.

    Returns
    -------
    The directory holding ``model.safetensors``.
    """
    if not (EXAMPLE_REFERENCE_DIR / "model.safetensors").exists():
        raise FileNotFoundError(
            f"The example reference is missing from {EXAMPLE_REFERENCE_DIR}; "
            "rebuild it with `python scripts/train_example_reference.py`."
        )
    return EXAMPLE_REFERENCE_DIR
