"""Turn the authors' released checkpoint into an sctrilemma reference."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp

from sctrilemma.io._upstream import read_checkpoint_tensors, read_upstream_vocabulary, upstream_to_module_state

if TYPE_CHECKING:
    from collections.abc import Mapping
    from os import PathLike

logger = logging.getLogger(__name__)


def import_upstream_checkpoint(
    checkpoint: str | PathLike[str],
    vocabulary: str | PathLike[str],
    out_dir: str | PathLike[str],
    *,
    n_heads: int = 8,
    dropout_rate: float = 0.1,
    crop_size: int = 4096,
    gene_symbols: Mapping[str, str] | None = None,
    overwrite: bool = False,
) -> Path:
    """Convert the authors' Lightning checkpoint and Census vocabulary into an sctrilemma reference.

    The checkpoint is read with :func:`~sctrilemma.io.read_checkpoint_tensors`, which rebuilds only
    tensors and never runs code from the file. The released checkpoint carries no PB-Cond codebook
    (the centroids were a training input), so the imported reference embeds and reconstructs but
    :meth:`~sctrilemma.SCTrilemma.get_pseudobulk_codes` is unavailable for it.

    Parameters
    ----------
    checkpoint
        The Lightning checkpoint (e.g. ``final.ckpt``).
    vocabulary
        The vocabulary JSON (Ensembl ID to index, with ``<pad>`` and ``<mask>`` at 0 and 1).
    out_dir
        Directory for the reference (``model.safetensors``).
    n_heads
        Attention heads; not recoverable from weight shapes (the paper uses 8).
    dropout_rate, crop_size
        Paper values; they do not change the weights.
    gene_symbols
        Optional Ensembl ID to symbol map, so that queries with symbols can be matched.
    overwrite
        Replace an existing reference.

    Returns
    -------
    Path of the written reference file.
    """
    from sctrilemma.model import SCTrilemma
    from sctrilemma.model._model import MIN_EXPRESSED_GENES

    module_state, config = upstream_to_module_state(read_checkpoint_tensors(checkpoint))
    genes = read_upstream_vocabulary(vocabulary)
    if len(genes) != config["n_input"]:
        raise ValueError(
            f"The vocabulary has {len(genes)} entries but the checkpoint's gene embedding has {config['n_input']} rows; "
            "pass the vocabulary file the checkpoint was trained with."
        )
    # A one-cell AnnData over the vocabulary gives the model its scvi-tools registry; the cell expresses enough
    # genes for setup_anndata not to warn about it.
    var = pd.DataFrame(index=pd.Index(genes, name="feature_id"))
    if gene_symbols is not None:
        var["gene_symbol"] = [gene_symbols.get(g, g) for g in genes]
    columns = np.arange(max(0, len(genes) - MIN_EXPRESSED_GENES), len(genes))
    ones = np.ones(columns.size, np.float32)
    template = ad.AnnData(sp.csr_matrix((ones, (np.zeros_like(columns), columns)), shape=(1, len(genes))), var=var)
    SCTrilemma.setup_anndata(template)
    config = dict(config)
    config.pop("n_input")
    model = SCTrilemma(
        template, preset="paper", n_heads=n_heads, dropout_rate=dropout_rate, crop_size=crop_size, **config
    )
    model.module.load_state_dict(module_state)
    model.is_trained_ = True
    model.save(out_dir, overwrite=overwrite)
    logger.info("Imported %s (%d genes) into %s.", checkpoint, len(genes), out_dir)
    return Path(out_dir) / "model.safetensors"
