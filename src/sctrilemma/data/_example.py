"""The small real example dataset shipped with sctrilemma."""

from __future__ import annotations

from pathlib import Path

import anndata as ad

EXAMPLE_DIR = Path(__file__).parent / "example"
EXAMPLE_FILE = EXAMPLE_DIR / "kang2018_pbmc_example.h5ad"


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
