"""What the model reads of each cell: gene crops, and counts thinned in depth or with genes dropped.

Gene crops choose which genes become the encoder's tokens and the decoder's targets. Counts are thinned at random in
training and to one common depth for embedding, and genes are dropped in training. All functions take a dense count
batch ``x`` of shape ``(batch, n_genes)`` and return gene indices or counts over the model's genes, so no per-cell
Python loop runs.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

# Genes expressed in fewer than this fraction of the cells trained on so far are "rare" for the decoder's target
# sample, and this share of its zero-count positions samples them (docs/user_guide.md).
RARE_GENE_DETECTION = 0.02
RARE_ZERO_SHARE = 0.125


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


def training_crop(
    x: torch.Tensor,
    crop_size: int,
    generator: torch.Generator | None = None,
    measured: torch.Tensor | None = None,
) -> GeneCrop:
    """The paper's training crop.

    Each cell keeps its expressed genes, a uniform random subset of ``crop_size`` of them if it has
    more; with fewer it is filled up with randomly drawn unexpressed genes, which are real zero-count
    reconstruction targets. With fewer genes than ``crop_size`` in total every gene is used.
    ``measured`` ``(batch, n_genes)`` marks the genes each cell's study measured: the zero-count genes
    are drawn among those only, and positions left unfilled are masked.
    """
    n = min(crop_size, x.shape[1])
    # Expressed genes get keys in [1, 2), unexpressed ones in [0, 1): top-n takes a uniform random
    # subset of the expressed genes first, then uniform random unexpressed genes.
    keys = torch.rand(x.shape, generator=generator, device=x.device, dtype=torch.float32)
    keys = keys + (x > 0).to(keys.dtype)
    if measured is None:
        genes = keys.topk(n, dim=1, sorted=False).indices
        return GeneCrop(genes, x.gather(1, genes), None)
    drawn = torch.where(measured | (x > 0), keys, -1.0).topk(n, dim=1, sorted=False)
    mask = drawn.values >= 0
    return GeneCrop(drawn.indices, x.gather(1, drawn.indices) * mask, mask)


def expressed_crop(
    x: torch.Tensor,
    crop_size: int,
    random_ties: bool = False,
    generator: torch.Generator | None = None,
    among: torch.Tensor | None = None,
) -> GeneCrop:
    """The embedding crop: each cell's top-``crop_size`` expressed genes, no zero genes.

    Genes are in decreasing order of counts, ties in gene order, so the crop of a cell with more
    expressed genes than ``crop_size`` does not depend on the sorting algorithm. Cells with fewer
    expressed genes than the longest cell in the batch are padded (real positions first) and masked.
    With ``random_ties`` (training), equal counts are ordered at random instead, so the genes kept
    are the same as in embedding except among equal counts at the crop's edge. ``among`` (increasing
    gene indices) restricts the crop to those genes; the crop's indices are still into ``x``'s genes.
    """
    if among is not None:
        crop = expressed_crop(x[:, among], crop_size, random_ties, generator)
        return crop._replace(genes=among[crop.genes])
    expressed = x > 0
    n_expressed = int(expressed.sum(dim=1, dtype=torch.int32).max())
    n = max(1, min(crop_size, n_expressed))
    if random_ties:
        # Counts are integers: noise in [0, 0.5) on the expressed genes reorders equal counts only.
        noise = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        genes = torch.addcmul(x, noise, expressed.to(x.dtype), value=0.5).topk(n, dim=1, sorted=True).indices
        counts = x.gather(1, genes)
        return GeneCrop(genes, counts, counts > 0)
    if n_expressed > n:
        counts, genes = x.sort(dim=1, descending=True, stable=True)
        counts, genes = counts[:, :n], genes[:, :n]
    else:
        counts, genes = x.topk(n, dim=1, sorted=True)
    return GeneCrop(genes, counts, counts > 0)


def _uniform_stratum(
    eligible: torch.Tensor, n: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` genes per cell drawn uniformly without replacement from its ``eligible`` ones.

    Returns their indices, their mask (``False`` where a cell has fewer than ``n``) and their inverse
    inclusion probability ``(batch, n)``. A cell's ``k``-th eligible gene is found by a binary search
    of its running count of eligible genes, so no pass ranks every gene: ``2 n`` ranks are drawn with
    replacement and the first ``n`` distinct ones kept, which is a uniform sample without replacement.
    A cell with at most ``n`` eligible genes takes them all; one whose draws repeat too often to give
    ``n`` distinct ranks draws again by ranking random keys over its genes.
    """
    batch = eligible.shape[0]
    running = eligible.cumsum(1, dtype=torch.int32)
    pool = running[:, -1:]
    draws = torch.rand(batch, 2 * n, generator=generator, device=eligible.device)
    ranks = (draws * pool).to(torch.int32) + 1
    # A rank repeats an earlier draw if a stable sort puts it right after an equal one.
    ordered, order = ranks.sort(dim=1, stable=True)
    repeat_sorted = torch.zeros_like(ordered, dtype=torch.bool)
    repeat_sorted[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    first = ~torch.zeros_like(repeat_sorted).scatter_(1, order, repeat_sorted)
    position_key = first * torch.arange(2 * n, 0, -1, device=eligible.device)
    kept = position_key.topk(n, dim=1, sorted=True)
    ranks = ranks.gather(1, kept.indices)
    few = pool <= n  # every eligible gene, in gene order
    ranks = torch.where(few, torch.arange(1, n + 1, device=eligible.device, dtype=torch.int32), ranks)
    mask = ranks <= pool
    genes = torch.searchsorted(running, ranks.minimum(pool.clamp_min(1))).clamp_max(eligible.shape[1] - 1).long()
    redraw = (~few & (kept.values == 0).any(1, keepdim=True)).squeeze(1).nonzero().squeeze(1)
    if redraw.numel():
        keys = torch.rand(redraw.numel(), eligible.shape[1], generator=generator, device=eligible.device)
        genes[redraw] = torch.where(eligible[redraw], keys, -1.0).topk(n, dim=1).indices
    weight = pool / pool.clamp(max=n).clamp_min(1)
    return genes, mask, weight.expand(-1, n)


def target_sample(
    x: torch.Tensor,
    n_targets: int,
    generator: torch.Generator | None = None,
    rare_genes: torch.Tensor | None = None,
    measured: torch.Tensor | None = None,
) -> GeneCrop:
    """Decoder targets: a stratified random sample of ``n_targets`` genes per cell, with weights.

    A quarter of the positions holds the cell's most expressed genes (weight 1), a quarter a uniform
    random sample of its other expressed genes, and half a uniform random sample of its zero-count
    genes; each sampled gene is weighted by the inverse of its inclusion probability. Weighted sums
    over the targets are then unbiased for sums over all genes (Horvitz-Thompson), so every step has
    zero-count targets and the likelihood estimates the one over the whole transcriptome. Positions a
    cell cannot fill (too few expressed or zero genes) are masked. With at most ``n_targets`` genes in
    total every gene is a target with weight 1.

    ``rare_genes`` ``(n_genes,)`` marks genes expressed in fewer than 2 % of the cells (``RARE_GENE_DETECTION``).
    When some are, an eighth of the zero-count positions (``RARE_ZERO_SHARE``) draw rare genes uniformly with
    replacement, masked where the cell expresses them, and the rest sample the cell's other zero-count genes. A
    zero of a gene that other cells express says more about the cell than one of a gene hardly any cell expresses,
    and it is now a target more often; the weights keep every sum unbiased. Only then can a gene appear twice.

    ``measured`` ``(batch, n_genes)`` marks the genes each cell's study measured (all when ``None``): zero-count
    targets are drawn among those only, so the sums, and the decoder's proportions, are over the measured genes.
    """
    batch, n_genes = x.shape
    if n_genes <= n_targets:
        genes = torch.arange(n_genes, device=x.device).expand(batch, n_genes)
        if measured is None:
            return GeneCrop(genes, x, None, torch.ones_like(x))
        mask = measured | (x > 0)
        return GeneCrop(genes, x * mask, mask, mask.to(x.dtype))
    n_top, n_other = n_targets // 4, n_targets // 4
    n_zero = n_targets - n_top - n_other
    expressed = x > 0
    unexpressed = ~expressed if measured is None else ~expressed & measured
    # Most expressed first, equal counts in gene order: deterministic given x, so these genes have
    # inclusion probability 1 (a random tie-break would make it less). A cell with fewer than n_top
    # expressed genes fills the rest with zero-count genes, which are masked.
    tie_break = 0.5 * torch.arange(n_genes, 0, -1, device=x.device, dtype=torch.float32) / n_genes
    top = (x.float() + tie_break).topk(n_top, dim=1).indices
    top_mask = x.gather(1, top) > 0
    chosen = torch.zeros_like(expressed).scatter_(1, top, top_mask)
    strata = [(top, top_mask, torch.ones(batch, n_top, device=x.device))]
    strata.append(_uniform_stratum(expressed & ~chosen, n_other, generator))
    rare_index = None if rare_genes is None else rare_genes.nonzero().squeeze(1)
    if rare_index is None or rare_index.numel() == 0:
        strata.append(_uniform_stratum(unexpressed, n_zero, generator))
    else:
        n_rare = max(1, round(n_zero * RARE_ZERO_SHARE))
        strata.append(_uniform_stratum(unexpressed & ~rare_genes, n_zero - n_rare, generator))
        # Rare genes are drawn with replacement from all of them and kept where the cell has none (Hansen-Hurwitz):
        # unbiased for the sum over the cell's rare zero-count genes without another pass over every gene.
        draws = torch.randint(rare_index.numel(), (batch, n_rare), generator=generator, device=x.device)
        rare = rare_index[draws]
        weight = torch.full((batch, n_rare), rare_index.numel() / n_rare, device=x.device)
        strata.append((rare, unexpressed.gather(1, rare), weight))
    genes, mask, weights = (torch.cat(parts, dim=1) for parts in zip(*strata, strict=True))
    return GeneCrop(genes, x.gather(1, genes) * mask, mask, weights.to(x.dtype) * mask)


class GeneDetection(nn.Module):
    """How many training cells have expressed each gene so far; names the rare genes for :func:`target_sample`.

    The counts are buffers that are not saved with the model: a loaded model starts counting again when it
    is trained, and until a first training batch is counted no gene is rare.
    """

    def __init__(self, n_genes: int) -> None:
        super().__init__()
        self.register_buffer("detected", torch.zeros(n_genes, dtype=torch.long), persistent=False)
        self.register_buffer("n_cells", torch.zeros((), dtype=torch.long), persistent=False)

    def update(self, x: torch.Tensor) -> None:
        """Count the cells of a training batch ``x`` ``(batch, n_genes)``."""
        self.detected += (x > 0).sum(0, dtype=torch.int32)
        self.n_cells += x.shape[0]

    def rare_genes(self) -> torch.Tensor | None:
        """``(n_genes,)`` mask of genes expressed in fewer than ``RARE_GENE_DETECTION`` of the cells counted."""
        if int(self.n_cells) == 0:
            return None
        return self.detected < RARE_GENE_DETECTION * self.n_cells


_MASK32 = 0xFFFFFFFF
# Molecules thinned per pass: bounds the memory of :func:`thin_to_depth` (about 50 bytes per molecule).
MOLECULES_PER_PASS = 1 << 22


def thin_counts(x: torch.Tensor, min_fraction: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Each cell's counts binomially thinned to a random fraction of its depth, log-uniform in ``[min_fraction, 1]``.

    A cell left without counts keeps its original ones.
    """
    thinned = torch.binomial(x, _per_cell_fractions(x, min_fraction, generator).expand_as(x), generator=generator)
    return _emptied_cells_restored(thinned, x)


def encoder_training_input(
    x: torch.Tensor, min_depth_fraction: float, gene_panel_min_fraction: float, among: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training counts the encoder reads, and their library over every gene, ``(batch, 1)``.

    ``x`` is thinned by :func:`thin_counts` and has genes dropped by :func:`drop_genes` (each where its fraction is
    below 1); the counts returned are those of the genes ``among`` (indices), or of every gene. When thinned without
    dropping, only the genes ``among`` are drawn one by one and the rest of each cell's depth in one binomial draw: the
    same distribution as thinning every gene, at a fraction of the cost on many genes.
    """
    if among is not None and min_depth_fraction < 1.0 and gene_panel_min_fraction >= 1.0:
        return _thinned_among(x, min_depth_fraction, among)
    if min_depth_fraction < 1.0:
        x = thin_counts(x, min_depth_fraction)
    if gene_panel_min_fraction < 1.0:
        x = drop_genes(x, gene_panel_min_fraction)
    return (x if among is None else x[:, among]), x.sum(1, keepdim=True)


def _thinned_among(x: torch.Tensor, min_fraction: float, among: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`thin_counts` of the genes ``among``, and the library of every gene thinned alike.

    A sum of binomials with one rate is one binomial of the summed counts, so the genes outside ``among`` take a
    single draw per cell. A cell left without counts keeps its original ones, as in :func:`thin_counts`.
    """
    fractions = _per_cell_fractions(x, min_fraction, None)
    read = x[:, among]
    rest = (x.sum(1, keepdim=True) - read.sum(1, keepdim=True)).round().clamp_min(0)
    thinned = torch.binomial(read, fractions.expand_as(read))
    library = thinned.sum(1, keepdim=True) + torch.binomial(rest, fractions)
    emptied = library.squeeze(1) == 0
    if bool(emptied.any()):
        thinned[emptied] = read[emptied]
        library[emptied] = x[emptied].sum(1, keepdim=True)
    return thinned, library


def drop_genes(x: torch.Tensor, min_fraction: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Each cell's counts with a random share of its genes set to zero, the share kept log-uniform in ``[min_fraction, 1]``.

    A cell left without counts keeps its original ones.
    """
    fractions = _per_cell_fractions(x, min_fraction, generator)
    kept = torch.rand(x.shape, generator=generator, device=x.device) < fractions
    return _emptied_cells_restored(x * kept, x)


def _per_cell_fractions(x: torch.Tensor, min_fraction: float, generator: torch.Generator | None) -> torch.Tensor:
    """One random fraction per cell of ``x``, ``(batch, 1)``, log-uniform in ``[min_fraction, 1]``."""
    return (torch.rand(x.shape[0], 1, generator=generator, device=x.device) * math.log(min_fraction)).exp()


def _emptied_cells_restored(thinned: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``thinned`` (changed in place), with every cell that thinning left without counts given back its counts in ``x``."""
    emptied = thinned.sum(1) == 0
    if bool(emptied.any()):
        thinned[emptied] = x[emptied]
    return thinned


def _hash32(values: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash of each of the int64 ``values`` (their low 32 bits), the same on every device."""
    h = values & _MASK32
    h = h ^ (h >> 16)
    h = (h * 0x45D9F3B) & _MASK32
    h = h ^ (h >> 16)
    h = (h * 0x45D9F3B) & _MASK32
    return h ^ (h >> 16)


def thin_to_depth(x: torch.Tensor, depth: float) -> torch.Tensor:
    """Each cell deeper than ``depth`` binomially thinned to ``depth`` counts in expectation; shallower cells unchanged.

    Every molecule of a cell is kept with probability ``depth / library``. The draws are a hash of the cell's own
    counts, the gene and the molecule, so a cell is thinned the same way in any batch, in any order and on any
    device, and the same counts always give the same result. A cell left without counts keeps its own.

    Parameters
    ----------
    x
        Raw counts ``(batch, n_genes)``; non-integer values are rounded.
    depth
        The depth to thin to, in counts.

    Returns
    -------
    The thinned counts, a new tensor of ``x``'s shape and dtype.
    """
    library = x.sum(1)
    rows = (library > depth).nonzero().squeeze(1)
    out = x.clone()
    if rows.numel() == 0:
        return out
    molecules = library[rows].round().long()
    start = 0
    while start < rows.numel():
        # as many cells as fit in one pass, at least one
        n_cells = max(1, int((molecules[start:].cumsum(0) <= MOLECULES_PER_PASS).sum()))
        chunk = rows[start : start + n_cells]
        thinned = _thin_cells(x[chunk], depth / library[chunk])
        out[chunk] = _emptied_cells_restored(thinned, x[chunk])
        start += n_cells
    return out


def _thin_cells(x: torch.Tensor, rate: torch.Tensor) -> torch.Tensor:
    cell, gene = x.nonzero(as_tuple=True)
    counts = x[cell, gene].round().long()
    entry_key = _hash32(gene * 0x9E3779B1 + counts)
    cell_key = _hash32(torch.zeros(x.shape[0], dtype=torch.long, device=x.device).index_add_(0, cell, entry_key))
    # Per molecule: a uniform from the hash of (cell, gene, molecule number within the entry), kept below the rate.
    entry_key = _hash32(cell_key[cell] ^ gene)
    molecule = torch.arange(int(counts.sum()), device=x.device) - torch.repeat_interleave(
        counts.cumsum(0) - counts, counts
    )
    uniform = _hash32(torch.repeat_interleave(entry_key, counts) + molecule)
    kept = uniform < torch.repeat_interleave((rate.double()[cell] * 2**32).ceil().long(), counts)
    entry = torch.repeat_interleave(torch.arange(counts.numel(), device=x.device), counts)
    thinned = torch.zeros_like(x)
    thinned[cell, gene] = torch.zeros(counts.numel(), dtype=x.dtype, device=x.device).index_add_(
        0, entry, kept.to(x.dtype)
    )
    return thinned
