"""Vectorised gene crops: which genes of each cell become tokens and decoder targets.

All functions take a dense count batch ``x`` of shape ``(batch, n_genes)`` and return gene indices
into the model's genes, so no per-cell Python loop runs.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

TARGET_SUM = 1e4


class GeneCrop(NamedTuple):
    """A per-cell gene subset.

    Attributes
    ----------
    genes
        Gene indices, ``(batch, n)``.
    counts
        Raw counts of those genes, ``(batch, n)``.
    mask
        ``(batch, n)``, ``True`` for real positions; ``None`` when every position is real.
    """

    genes: torch.Tensor
    counts: torch.Tensor
    mask: torch.Tensor | None


def training_crop(x: torch.Tensor, crop_size: int, generator: torch.Generator | None = None) -> GeneCrop:
    """The paper's training crop.

    Each cell keeps its expressed genes, a uniform random subset of ``crop_size`` of them if it has
    more; with fewer it is filled up with randomly drawn unexpressed genes, which are real zero-count
    reconstruction targets. With fewer genes than ``crop_size`` in total every gene is used.
    """
    n = min(crop_size, x.shape[1])
    # Expressed genes get keys in [1, 2), unexpressed ones in [0, 1): top-n takes a uniform random
    # subset of the expressed genes first, then uniform random unexpressed genes.
    keys = torch.rand(x.shape, generator=generator, device=x.device, dtype=torch.float32)
    keys = keys + (x > 0).to(keys.dtype)
    genes = keys.topk(n, dim=1, sorted=False).indices
    return GeneCrop(genes, x.gather(1, genes), None)


def expressed_crop(x: torch.Tensor, crop_size: int) -> GeneCrop:
    """The embedding crop: each cell's top-``crop_size`` expressed genes, no zero genes.

    Genes are in decreasing order of counts, ties in gene order, so the crop of a cell with more
    expressed genes than ``crop_size`` does not depend on the sorting algorithm. Cells with fewer
    expressed genes than the longest cell in the batch are padded (real positions first) and masked.
    """
    n_expressed = int((x > 0).sum(dim=1).max())
    n = max(1, min(crop_size, n_expressed))
    if n_expressed > n:
        counts, genes = x.sort(dim=1, descending=True, stable=True)
        counts, genes = counts[:, :n], genes[:, :n]
    else:
        counts, genes = x.topk(n, dim=1, sorted=True)
    return GeneCrop(genes, counts, counts > 0)


def log_normalize(counts: torch.Tensor, library: torch.Tensor) -> torch.Tensor:
    """``log1p(1e4 * counts / library)`` with the whole-cell ``library`` ``(batch, 1)``."""
    return torch.log1p(counts * (TARGET_SUM / library.clamp_min(1.0)))
