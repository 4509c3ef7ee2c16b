from __future__ import annotations

import numpy as np
import pytest
import torch

from sctrilemma.module import expressed_crop, training_crop


def _assert_no_duplicates(genes: torch.Tensor) -> None:
    ordered = genes.sort(dim=1).values
    assert (ordered[:, 1:] != ordered[:, :-1]).all()


def test_training_crop_keeps_expressed_genes_and_pads_with_zero_genes(counts: torch.Tensor, tiny: dict) -> None:
    crop_size = tiny["crop_size"]
    crop = training_crop(counts, crop_size, generator=torch.Generator().manual_seed(0))
    n_cells, n_genes = counts.shape
    assert crop.genes.shape == crop.counts.shape == (n_cells, crop_size)
    assert crop.mask is None
    assert ((crop.genes >= 0) & (crop.genes < n_genes)).all()
    assert torch.equal(crop.counts, counts.gather(1, crop.genes))
    _assert_no_duplicates(crop.genes)

    n_expressed = (counts > 0).sum(1)
    few = n_expressed <= crop_size
    assert few.any()
    assert (~few).any()  # the real data has both kinds of cells
    for i in torch.nonzero(few).ravel().tolist():
        expressed = set(torch.nonzero(counts[i]).ravel().tolist())
        chosen = crop.genes[i].tolist()
        assert expressed <= set(chosen)
        padding = [g for g in chosen if g not in expressed]
        assert len(padding) == crop_size - len(expressed)
        assert (counts[i, padding] == 0).all()
    # Cells with more expressed genes than positions: every position is an expressed gene.
    assert (crop.counts[~few] > 0).all()


def test_training_crop_uses_all_genes_when_fewer_than_crop_size(counts: torch.Tensor, tiny: dict) -> None:
    x = counts[:, :100]
    assert tiny["crop_size"] > 100
    crop = training_crop(x, tiny["crop_size"])
    assert crop.genes.shape == (x.shape[0], 100)
    assert torch.equal(crop.genes.sort(dim=1).values, torch.arange(100).expand(x.shape[0], -1))
    assert torch.equal(crop.counts, x.gather(1, crop.genes))


def test_training_crop_is_a_uniform_random_subset(counts: torch.Tensor, tiny: dict) -> None:
    crop_size, n_draws = tiny["crop_size"], 400
    n_expressed = (counts > 0).sum(1)
    many, few = int(n_expressed.argmax()), int(n_expressed.argmin())
    assert n_expressed[many] > 2 * crop_size
    assert n_expressed[few] < crop_size
    for cell, pool in ((many, counts[many] > 0), (few, counts[few] == 0)):
        n_chosen = crop_size if cell == many else crop_size - int(n_expressed[few])
        crop = training_crop(counts[cell].repeat(n_draws, 1), crop_size, generator=torch.Generator().manual_seed(1))
        frequency = torch.zeros(counts.shape[1])
        frequency.index_add_(0, crop.genes.ravel(), torch.ones(crop.genes.numel()))
        frequency = frequency[pool] / n_draws
        p = n_chosen / int(pool.sum())
        assert abs(frequency.mean().item() - p) < 1e-6
        assert (frequency - p).abs().max() < 6 * np.sqrt(p * (1 - p) / n_draws)
    # The subset of expressed genes is not biased towards high counts.
    values = counts[many][counts[many] > 0]
    crop = training_crop(counts[many].repeat(n_draws, 1), crop_size, generator=torch.Generator().manual_seed(2))
    assert abs(crop.counts.mean().item() - values.mean().item()) < 0.1 * values.mean().item()


def test_training_crop_differs_between_draws(counts: torch.Tensor, tiny: dict) -> None:
    a = training_crop(counts, tiny["crop_size"], generator=torch.Generator().manual_seed(0))
    b = training_crop(counts, tiny["crop_size"], generator=torch.Generator().manual_seed(1))
    c = training_crop(counts, tiny["crop_size"], generator=torch.Generator().manual_seed(0))
    assert torch.equal(a.genes, c.genes)
    assert not torch.equal(a.genes.sort(1).values, b.genes.sort(1).values)


@pytest.mark.parametrize("crop_size", [256, 4096])
def test_expressed_crop(counts: torch.Tensor, crop_size: int) -> None:
    crop = expressed_crop(counts, crop_size)
    n_expressed = (counts > 0).sum(1)
    width = min(crop_size, int(n_expressed.max()))
    assert crop.genes.shape == crop.counts.shape == crop.mask.shape == (counts.shape[0], width)
    assert torch.equal(crop.counts, counts.gather(1, crop.genes))
    _assert_no_duplicates(crop.genes)
    # The mask marks exactly the nonzero counts; no zero gene is left unmasked.
    assert torch.equal(crop.mask, crop.counts > 0)
    assert (crop.counts[crop.mask] > 0).all()
    assert (crop.counts[~crop.mask] == 0).all()
    assert torch.equal(crop.mask.sum(1), n_expressed.clamp_max(crop_size))
    # Top expressed genes: every kept count is at least every dropped count of the same cell.
    dropped = counts.clone()
    dropped.scatter_(1, crop.genes, -1.0)
    kept_min = torch.where(crop.mask, crop.counts, torch.full_like(crop.counts, float("inf"))).min(1).values
    assert (kept_min >= dropped.max(1).values).all()
    if crop_size == 4096:  # everything fits: the kept genes are exactly the expressed genes
        assert (n_expressed < crop_size).all()
        assert (crop.mask.sum(1) == n_expressed).all()
    else:
        assert (n_expressed < crop_size).any()
        assert (n_expressed > crop_size).any()


def test_expressed_crop_of_an_empty_batch_has_width_one() -> None:
    crop = expressed_crop(torch.zeros(3, 10), 8)
    assert crop.genes.shape == (3, 1)
    assert not crop.mask.any()


def test_expressed_crop_breaks_ties_by_gene_order() -> None:
    x = torch.tensor([[1.0, 3.0, 1.0, 0.0, 1.0, 3.0, 1.0], [0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 5.0]])
    crop = expressed_crop(x, 3)
    assert crop.genes.tolist() == [[1, 5, 0], [6, 1, 0]]
    assert crop.mask.tolist() == [[True, True, True], [True, True, False]]


def test_expressed_crop_among_some_genes_reads_only_those(counts: torch.Tensor) -> None:
    among = torch.arange(0, counts.shape[1], 3)
    mask = torch.zeros(counts.shape[1], dtype=torch.bool)
    mask[among] = True
    crop = expressed_crop(counts, 64, among=among)
    masked = expressed_crop(counts * mask, 64)  # the same crop, taken from counts zeroed outside those genes
    assert torch.equal(crop.mask, masked.mask)
    assert torch.equal(crop.genes[crop.mask], masked.genes[masked.mask])
    assert torch.equal(crop.counts, counts.gather(1, crop.genes) * crop.mask)
    drawn = expressed_crop(counts, 64, random_ties=True, among=among)
    assert mask[drawn.genes].all()
    assert torch.equal(drawn.counts, counts.gather(1, drawn.genes))
    assert torch.equal(drawn.mask.sum(1), crop.mask.sum(1))
