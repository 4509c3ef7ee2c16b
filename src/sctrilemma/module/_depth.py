"""Counts thinned in depth (at random in training, to one common depth for embedding) and genes dropped in training."""

from __future__ import annotations

import math

import torch

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
