"""Decoder target samples, the training crop of the decoupled regime, and count thinning."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sctrilemma.module import SCTrilemmaModule, expressed_crop, target_sample
from sctrilemma.module._inputs import _uniform_stratum, drop_genes, encoder_training_input, thin_counts


def test_every_target_sample_has_expressed_and_zero_count_targets(counts: torch.Tensor) -> None:
    sample = target_sample(counts, 64, generator=torch.Generator().manual_seed(0))
    assert (
        sample.genes.shape == sample.counts.shape == sample.mask.shape == sample.weights.shape == (counts.shape[0], 64)
    )
    assert torch.equal(sample.counts, counts.gather(1, sample.genes) * sample.mask)
    real = sample.mask
    assert ((sample.counts > 0) & real).sum(1).min() >= 16  # a quarter most expressed, a quarter other expressed
    assert ((sample.counts == 0) & real).sum(1).min() == 32  # half zero-count genes, in every cell
    ordered = torch.where(real, sample.genes, -torch.arange(1, 65).expand_as(sample.genes)).sort(1).values
    assert (ordered[:, 1:] != ordered[:, :-1]).all()  # no gene twice
    # The first quarter is each cell's most expressed genes, with weight 1.
    top = counts.topk(16, dim=1).values
    assert torch.equal(sample.counts[:, :16].sort(1, descending=True).values, top)
    assert (sample.weights[:, :16] == 1).all()


def test_a_stratum_a_cell_cannot_fill_is_masked() -> None:
    x = torch.zeros(3, 200)
    x[0] = 1.0  # every gene expressed: no zero-count gene to draw
    x[1, :10] = 5.0  # fewer expressed genes than the top quarter holds: no other expressed gene
    x[2, :40] = torch.arange(1.0, 41.0)
    sample = target_sample(x, 64, generator=torch.Generator().manual_seed(0))
    assert not sample.mask[0, 32:].any()
    assert (sample.weights[0, 32:] == 0).all()
    assert sample.mask[1, :10].all()
    assert not sample.mask[1, 10:32].any()
    assert (sample.weights[1, 16:32] == 0).all()
    assert sample.mask[1, 32:].all()
    assert sample.mask[2].all()
    assert torch.equal(sample.counts[2, :16].sort().values, torch.arange(25.0, 41.0))


@pytest.mark.parametrize("pool", [5, 16, 17, 40, 900])
def test_each_stratum_is_a_uniform_sample_without_replacement(pool: int) -> None:
    """Every eligible gene is drawn with probability ``n / pool`` and no gene twice, whatever the pool's size.

    Pools a little larger than ``n`` exercise the redraw of cells whose ranks repeat too often.
    """
    n, n_genes, n_draws = 16, 1000, 4000
    eligible = torch.zeros(2, n_genes, dtype=torch.bool)
    eligible[0, torch.randperm(n_genes, generator=torch.Generator().manual_seed(0))[:pool]] = True
    eligible[1] = True
    generator = torch.Generator().manual_seed(1)
    hits = torch.zeros(2, n_genes)
    for _ in range(n_draws):
        genes, mask, weight = _uniform_stratum(eligible, n, generator)
        assert eligible.gather(1, genes)[mask].all()
        for row in range(2):
            chosen = genes[row][mask[row]]
            assert chosen.unique().numel() == chosen.numel() == min(n, int(eligible[row].sum()))
            hits[row, chosen] += 1
    torch.testing.assert_close(weight[0], torch.full((n,), max(pool / n, 1.0)))
    frequency = hits[0][eligible[0]] / n_draws
    expected = min(n / pool, 1.0)
    assert (frequency - expected).abs().max() < 5 * (expected * (1 - expected) / n_draws) ** 0.5 + 1e-6
    assert hits[1].min() > 0
    assert (hits[1] / n_draws - n / n_genes).abs().max() < 0.01


def test_target_sample_weighted_sums_are_unbiased_for_sums_over_all_genes(counts: torch.Tensor) -> None:
    x = counts[:6]
    values = torch.rand(x.shape, generator=torch.Generator().manual_seed(1)) + x  # any per-gene quantity
    generator = torch.Generator().manual_seed(2)
    draws = torch.stack(
        [
            (sample.weights * values.gather(1, sample.genes)).sum(1)
            for sample in (target_sample(x, 64, generator=generator) for _ in range(3000))
        ]
    )
    np.testing.assert_allclose(draws.mean(0), values.sum(1), rtol=0.01)


def test_target_sample_takes_every_gene_when_there_are_few(counts: torch.Tensor) -> None:
    x = counts[:, :40]
    sample = target_sample(x, 64)
    assert torch.equal(sample.genes, torch.arange(40).expand(x.shape[0], -1))
    assert sample.mask is None
    assert (sample.weights == 1).all()


def test_training_and_embedding_crops_keep_the_same_genes(counts: torch.Tensor) -> None:
    crop_size = 128
    embedding = expressed_crop(counts, crop_size)
    training = expressed_crop(counts, crop_size, random_ties=True)
    for i in range(counts.shape[0]):
        kept_e = set(embedding.genes[i][embedding.mask[i]].tolist())
        kept_t = set(training.genes[i][training.mask[i]].tolist())
        assert len(kept_e) == len(kept_t)
        edge = embedding.counts[i][embedding.mask[i]].min()
        # Identical except among genes whose count equals the crop's smallest kept count.
        assert {g for g in kept_e if counts[i, g] > edge} == {g for g in kept_t if counts[i, g] > edge}


def test_module_trains_on_the_embedding_crop_with_sampled_targets(
    counts: torch.Tensor, tiny: dict, module_sizes: dict
) -> None:
    module = SCTrilemmaModule(counts.shape[1], **module_sizes, prior="normal", n_decoder_targets=32)
    module.train()
    inference = module.inference(counts[:50])
    expected = expressed_crop(counts[:50], tiny["crop_size"])
    assert inference["crop"].genes.shape == expected.genes.shape
    generative_input = module._get_generative_input({"X": counts[:50]}, inference)
    assert generative_input["target"].weights is not None
    assert ((generative_input["target"].counts == 0) & generative_input["target"].mask).any(1).all()
    _, _, loss = module({"X": counts[:50]})
    assert torch.isfinite(loss.loss)
    loss.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters() if p.grad is not None)


def test_decoder_output_changes_with_the_latent_tokens(counts: torch.Tensor, tiny: dict, module_sizes: dict) -> None:
    module = SCTrilemmaModule(counts.shape[1], **module_sizes, prior="normal", n_decoder_targets=32).eval()
    genes = torch.arange(100)
    tokens = torch.randn(3, tiny["n_latent_tokens"], tiny["n_hidden"])
    with torch.no_grad():
        own = module.decode(tokens, tokens.mean(1), genes)
        other = module.decode(tokens.roll(1, 0), tokens.roll(1, 0).mean(1), genes)
    assert (own - other).abs().amax() > 1e-3


def test_thin_counts_keeps_a_random_fraction_of_each_cells_depth(counts: torch.Tensor) -> None:
    thinned = thin_counts(counts, 0.25, generator=torch.Generator().manual_seed(0))
    assert (thinned <= counts).all()
    assert (thinned == thinned.round()).all()
    fraction = thinned.sum(1) / counts.sum(1)
    assert fraction.min() > 0.2
    assert fraction.max() <= 1.0
    assert fraction.std() > 0.1  # a different depth per cell
    assert torch.equal(thin_counts(counts, 1.0), counts)


def test_drop_genes_zeroes_a_random_share_of_each_cells_genes(counts: torch.Tensor) -> None:
    dropped = drop_genes(counts, 0.1, generator=torch.Generator().manual_seed(0))
    assert ((dropped == counts) | (dropped == 0)).all()  # a gene is kept whole or dropped
    kept = (dropped > 0).sum(1) / (counts > 0).sum(1)
    assert kept.min() > 0.0
    assert kept.max() <= 1.0
    assert kept.std() > 0.1  # a different share per cell
    assert kept.median() < 0.6  # log-uniform in [0.1, 1]: median about 0.32
    assert torch.equal(drop_genes(counts, 1.0), counts)


def test_a_cell_thinned_to_nothing_keeps_its_counts() -> None:
    x = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.0], [400.0, 300.0, 500.0]])
    original = x.clone()
    # fractions down to 1e-30: the cells of one or two molecules lose them all and are given them back
    thinned = thin_counts(x, 1e-30, generator=torch.Generator().manual_seed(0))
    assert torch.equal(thinned[:3], x[:3])
    assert (thinned[3] <= x[3]).all()
    assert torch.equal(x, original)


def test_thinning_among_the_encoders_genes_thins_the_rest_of_the_depth_alike() -> None:
    x = torch.poisson(torch.full((400, 50), 20.0), generator=torch.Generator().manual_seed(0))
    among = torch.arange(0, 50, 5)  # ten genes read, 40 summed
    torch.manual_seed(0)
    read, library = encoder_training_input(x, 0.25, 1.0, among)
    assert read.shape == (400, 10)
    assert library.shape == (400, 1)
    assert (read <= x[:, among]).all()
    assert torch.equal(read, read.round())
    rest = x.sum(1) - x[:, among].sum(1)
    thinned_rest = library.squeeze(1) - read.sum(1)
    assert (thinned_rest >= 0).all()
    assert (thinned_rest <= rest).all()
    # one depth fraction per cell for both parts: each part's kept share follows it
    read_share, rest_share = read.sum(1) / x[:, among].sum(1), thinned_rest / rest
    assert np.corrcoef(read_share, rest_share)[0, 1] > 0.9
    # the same distribution of depths as thinning every gene
    every_gene = thin_counts(x, 0.25).sum(1) / x.sum(1)
    assert abs(float((library.squeeze(1) / x.sum(1)).mean() - every_gene.mean())) < 0.04
    # without thinning the counts are the cell's; with genes dropped every gene is drawn, and the library is their sum
    read, library = encoder_training_input(x, 1.0, 1.0, among)
    assert torch.equal(read, x[:, among])
    assert torch.equal(library, x.sum(1, keepdim=True))
    torch.manual_seed(1)
    dropped = drop_genes(x, 0.5)
    torch.manual_seed(1)
    read, library = encoder_training_input(x, 1.0, 0.5, among)
    assert torch.equal(read, dropped[:, among])
    assert torch.equal(library, dropped.sum(1, keepdim=True))


def test_a_cell_thinned_to_nothing_among_the_encoders_genes_keeps_its_counts() -> None:
    x = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 2.0], [400.0, 300.0, 500.0]])
    torch.manual_seed(0)
    read, library = encoder_training_input(x, 1e-30, 1.0, torch.tensor([0, 1]))
    assert torch.equal(read[:2], x[:2, :2])
    assert torch.equal(library[:2], x[:2].sum(1, keepdim=True))
    assert (read[2] <= x[2, :2]).all()
    assert library[2] <= x[2].sum()


@pytest.mark.parametrize("augmentation", [{"min_depth_fraction": 0.25}, {"gene_panel_min_fraction": 0.2}])
def test_only_the_encoder_sees_thinned_counts_or_dropped_genes_and_only_in_training(
    counts: torch.Tensor, tiny: dict, module_sizes: dict, augmentation: dict
) -> None:
    module = SCTrilemmaModule(counts.shape[1], **module_sizes, prior="normal", n_decoder_targets=32, **augmentation)
    x = counts[:50]
    inference = module.train().inference(x)
    crop = inference["crop"]  # its mask is `counts > 0`, so padded positions hold zero counts
    assert (crop.counts <= x.gather(1, crop.genes)).all()
    top = x.topk(tiny["crop_size"], dim=1).values.sum(1)
    assert (crop.counts.sum(1) < top).any()  # the encoder's input lost counts, or some of a cell's top genes
    generative_input = module._get_generative_input({"X": x}, inference)
    assert torch.equal(generative_input["library"], x.sum(1, keepdim=True))  # the decoder keeps the whole cell
    target = generative_input["target"]
    assert torch.equal(target.counts, x.gather(1, target.genes) * target.mask)
    with torch.no_grad():
        embedded = module.eval().inference(x)["crop"]
    assert torch.equal(embedded.counts, expressed_crop(x, tiny["crop_size"]).counts)  # embedding reads every count


def test_invalid_options_are_refused(module_sizes: dict) -> None:
    with pytest.raises(ValueError, match="n_decoder_targets"):
        SCTrilemmaModule(100, **module_sizes, n_decoder_targets=2)
    with pytest.raises(ValueError, match="min_depth_fraction"):
        SCTrilemmaModule(100, **module_sizes, min_depth_fraction=0.0)
    with pytest.raises(ValueError, match="gene_panel_min_fraction"):
        SCTrilemmaModule(100, **module_sizes, gene_panel_min_fraction=1.5)
    with pytest.raises(ValueError, match="needs `n_decoder_targets` a number"):
        SCTrilemmaModule(100, **module_sizes, gene_panel_min_fraction=0.5)
