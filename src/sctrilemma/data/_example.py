"""The small real example dataset and the pretrained references shipped with sctrilemma."""

from __future__ import annotations

from pathlib import Path

import anndata as ad

EXAMPLE_DIR = Path(__file__).parent / "example"
EXAMPLE_FILE = EXAMPLE_DIR / "kang2018_pbmc_example.h5ad"
PBMC_V3_FILE = EXAMPLE_DIR / "pbmc_1k_v3.h5ad"
EXAMPLE_REFERENCE_DIR = Path(__file__).parent / "reference"
BLOOD_REFERENCE_DIR = Path(__file__).parent / "blood_reference"
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


def load_pbmc_v3() -> ad.AnnData:
    """Load 400 PBMCs of 10x Genomics' 1k PBMC 3' v3 demo set, with all 19,974 genes: a full-transcriptome query.

    A healthy donor in another chemistry and lab than :func:`load_example`, by gene symbols (``var_names``), with
    no cell-type labels; raw integer counts. Its donor's other cells were among the blood reference's unlabelled
    training cells (:func:`blood_reference_dir`). Provenance: ``PROVENANCE.md`` next to the file.

    Returns
    -------
    A new AnnData of ``400 x 19974`` raw integer counts (CSR) on each call.
    """
    return ad.read_h5ad(PBMC_V3_FILE)


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
    return _shipped_reference(EXAMPLE_REFERENCE_DIR, "python scripts/train_example_reference.py")


def blood_reference_dir() -> Path:
    """Directory of the blood reference shipped with sctrilemma, trained on three studies of human blood.

    A ``preset="small"`` model trained by ``scripts/train_blood_reference.py --genes shared`` on 12,457 cells of
    Kang et al. 2018 (donors 1015, 1016, 1244), COMBAT 2022 COVID-19 blood (6 donors) and the 10x Genomics PBMC demo
    sets (3' v2, 3' v3, 5'), over the genes all three studies measured; Kang's donors 1256 and 1488 (also in
    :func:`load_example`) were never seen. Beside ``model.safetensors`` the directory holds scvi-hub's metadata and
    model card (``README.md``, with the training data and figures), so ``scvi.hub.HubModel(directory)`` loads it,
    and ``reference_cells.h5ad``: 4,000 of the training cells with their embedding (``obsm["X_sctrilemma"]``) and
    ``study``, ``donor``, ``chemistry``, ``condition`` and ``cell_type`` (Kang's cells only), for joint plots. The
    model carries a label classifier of Kang's four cell types (:meth:`~sctrilemma.SCTrilemma.predict_labels`).

    Returns
    -------
    The directory holding ``model.safetensors``.
    """
    command = "python scripts/train_blood_reference.py --genes shared --out src/sctrilemma/data/blood_reference"
    return _shipped_reference(BLOOD_REFERENCE_DIR, command)


def _shipped_reference(directory: Path, command: str) -> Path:
    """``directory`` if it holds a saved model, else a ``FileNotFoundError`` naming the ``command`` that rebuilds it."""
    if not (directory / "model.safetensors").exists():
        raise FileNotFoundError(f"The reference is missing from {directory}; rebuild it with `{command}`.")
    return directory
