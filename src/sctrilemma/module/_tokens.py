"""Vectorised gene crops: which genes of each cell become tokens and decoder targets.

All functions take a dense count batch ``x`` of shape ``(batch, n_genes)`` and return gene indices
into the model's genes, so no per-cell Python loop runs.
"""

from __future__ import annotations

import math
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
    weights
        ``(batch, n)`` inverse inclusion probabilities of sampled decoder targets (see
        :func:`target_sample`); ``None`` when the positions are not a weighted sample.
    """

    genes: torch.Tensor
    counts: torch.Tensor
    mask: torch.Tensor | None
    weights: torch.Tensor | None = None


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


def expressed_crop(
    x: torch.Tensor, crop_size: int, random_ties: bool = False, generator: torch.Generator | None = None
) -> GeneCrop:
    """The embedding crop: each cell's top-``crop_size`` expressed genes, no zero genes.

    Genes are in decreasing order of counts, ties in gene order, so the crop of a cell with more
    expressed genes than ``crop_size`` does not depend on the sorting algorithm. Cells with fewer
    expressed genes than the longest cell in the batch are padded (real positions first) and masked.
    With ``random_ties`` (training), equal counts are ordered at random instead, so the genes kept
    are the same as in embedding except among equal counts at the crop's edge.
    """
    n_expressed = int((x > 0).sum(dim=1).max())
    n = max(1, min(crop_size, n_expressed))
    if random_ties:
        # Counts are integers: noise in [0, 0.5) reorders equal counts only.
        noise = 0.5 * torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        genes = (x + noise * (x > 0)).topk(n, dim=1, sorted=True).indices
        counts = x.gather(1, genes)
        return GeneCrop(genes, counts, counts > 0)
    if n_expressed > n:
        counts, genes = x.sort(dim=1, descending=True, stable=True)
        counts, genes = counts[:, :n], genes[:, :n]
    else:
        counts, genes = x.topk(n, dim=1, sorted=True)
    return GeneCrop(genes, counts, counts > 0)


def target_sample(x: torch.Tensor, n_targets: int, generator: torch.Generator | None = None) -> GeneCrop:
    """Decoder targets: a stratified random sample of ``n_targets`` genes per cell, with weights.

    A quarter of the positions holds the cell's most expressed genes (weight 1), a quarter a uniform
    random sample of its other expressed genes, and half a uniform random sample of its zero-count
    genes; each sampled gene is weighted by the inverse of its inclusion probability. Weighted sums
    over the targets are then unbiased for sums over all genes (Horvitz-Thompson), so every step has
    zero-count targets and the likelihood estimates the one over the whole transcriptome. Positions a
    cell cannot fill (too few expressed or zero genes) are masked. With at most ``n_targets`` genes in
    total every gene is a target with weight 1.
    """
    batch, n_genes = x.shape
    if n_genes <= n_targets:
        genes = torch.arange(n_genes, device=x.device).expand(batch, n_genes)
        return GeneCrop(genes, x, None, torch.ones_like(x))
    n_top, n_other = n_targets // 4, n_targets // 4
    n_zero = n_targets - n_top - n_other
    keys = torch.rand(x.shape, generator=generator, device=x.device, dtype=torch.float32)
    expressed = x > 0
    n_expressed = expressed.sum(1, keepdim=True)
    # Most expressed first, equal counts in gene order: deterministic given x, so these genes have
    # inclusion probability 1 (a random tie-break would make it less). -1 marks ineligible genes.
    tie_break = 0.5 * torch.arange(n_genes, 0, -1, device=x.device, dtype=torch.float32) / n_genes
    top_keys = torch.where(expressed, x.float() + tie_break, -1.0).topk(n_top, dim=1)
    chosen = torch.zeros_like(expressed).scatter_(1, top_keys.indices, top_keys.values >= 0)
    other_keys = torch.where(expressed & ~chosen, keys, -1.0).topk(n_other, dim=1)
    zero_keys = torch.where(~expressed, keys, -1.0).topk(n_zero, dim=1)
    genes = torch.cat([top_keys.indices, other_keys.indices, zero_keys.indices], dim=1)
    mask = torch.cat([top_keys.values >= 0, other_keys.values >= 0, zero_keys.values >= 0], dim=1)
    n_other_pool = (n_expressed - n_top).clamp_min(0)
    n_zero_pool = n_genes - n_expressed
    other_weight = n_other_pool / n_other_pool.clamp(max=n_other).clamp_min(1)
    zero_weight = n_zero_pool / n_zero_pool.clamp(max=n_zero).clamp_min(1)
    weights = torch.cat(
        [torch.ones(batch, n_top, device=x.device), other_weight.expand(-1, n_other), zero_weight.expand(-1, n_zero)],
        dim=1,
    ).to(x.dtype)
    return GeneCrop(genes, x.gather(1, genes) * mask, mask, weights * mask)


def thin_counts(x: torch.Tensor, min_fraction: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Each cell's counts binomially thinned to a random fraction of its depth, log-uniform in ``[min_fraction, 1]``.

    A cell left without counts keeps its original ones.
    """
    log_fraction = torch.rand(x.shape[0], 1, generator=generator, device=x.device) * math.log(min_fraction)
    thinned = torch.binomial(x, log_fraction.exp().expand_as(x), generator=generator)
    return torch.where(thinned.sum(1, keepdim=True) > 0, thinned, x)


def log_normalize(counts: torch.Tensor, library: torch.Tensor) -> torch.Tensor:
    """``log1p(1e4 * counts / library)`` with the whole-cell ``library`` ``(batch, 1)``."""
    return torch.log1p(counts * (TARGET_SUM / library.clamp_min(1.0)))
