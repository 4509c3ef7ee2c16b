"""Studies that measured different genes: zero counts of a gene a cell's study did not measure are never targets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sctrilemma import SCTrilemma
from sctrilemma.module import SCTrilemmaModule, target_sample, training_crop


@pytest.fixture
def half_measured(counts: torch.Tensor) -> torch.Tensor:
    """``(batch, n_genes)``: every cell's study measured the first half of the genes and the ones it expresses."""
    measured = torch.zeros_like(counts, dtype=torch.bool)
    measured[:, : counts.shape[1] // 2] = True
    return measured | (counts > 0)


@pytest.mark.parametrize("rare", [False, True])
def test_target_sample_draws_zero_counts_among_measured_genes(
    counts: torch.Tensor, half_measured: torch.Tensor, rare: bool
) -> None:
    rare_genes = (torch.arange(counts.shape[1]) % 10 == 0) if rare else None  # any genes may be the rare ones
    sample = target_sample(counts, 64, torch.Generator().manual_seed(0), rare_genes=rare_genes, measured=half_measured)
    targets = half_measured.gather(1, sample.genes)
    assert (targets | ~sample.mask).all()
    assert ((sample.counts == 0) & sample.mask).sum(1).min() > 0  # zero-count targets remain, among measured genes


def test_target_sample_sums_are_unbiased_over_the_measured_genes(counts: torch.Tensor, half_measured) -> None:
    x, measured = counts[:6], half_measured[:6]
    values = torch.rand(x.shape, generator=torch.Generator().manual_seed(1)) + x
    generator = torch.Generator().manual_seed(2)
    samples = (target_sample(x, 64, generator=generator, measured=measured) for _ in range(3000))
    draws = torch.stack([(s.weights * values.gather(1, s.genes)).sum(1) for s in samples])
    np.testing.assert_allclose(draws.mean(0), (values * measured).sum(1), rtol=0.01)


def test_all_measured_changes_nothing(counts: torch.Tensor) -> None:
    everything = torch.ones_like(counts, dtype=torch.bool)
    plain = target_sample(counts, 64, torch.Generator().manual_seed(3))
    masked = target_sample(counts, 64, torch.Generator().manual_seed(3), measured=everything)
    for a, b in zip(plain, masked, strict=True):
        assert torch.equal(a, b)
    crop = training_crop(counts, 128, torch.Generator().manual_seed(4), measured=everything)
    assert torch.equal(crop.genes, training_crop(counts, 128, torch.Generator().manual_seed(4)).genes)
    assert crop.mask.all()


def test_training_crop_and_few_genes_keep_to_measured_genes(counts: torch.Tensor, half_measured) -> None:
    crop = training_crop(counts, 128, torch.Generator().manual_seed(0), measured=half_measured)
    assert (half_measured.gather(1, crop.genes) | ~crop.mask).all()
    assert torch.equal(crop.mask, half_measured.gather(1, crop.genes))  # every measured gene fills the crop first
    few = target_sample(counts[:, :40], 64, measured=half_measured[:, :40])
    assert torch.equal(few.mask, half_measured[:, :40])
    assert torch.equal(few.weights, half_measured[:, :40].float())


@pytest.mark.parametrize("n_decoder_targets", ["crop", 32])
def test_module_loss_ignores_unmeasured_genes_of_a_cells_dataset(
    counts: torch.Tensor, module_sizes: dict, n_decoder_targets: int | str
) -> None:
    module = SCTrilemmaModule(counts.shape[1], **module_sizes, prior="normal", n_decoder_targets=n_decoder_targets)
    module.train()
    measured = torch.zeros(2, counts.shape[1], dtype=torch.bool)
    measured[0] = True
    measured[1, : counts.shape[1] // 2] = True
    measured[1] |= (counts > 0).any(0)
    module.measured_genes = measured
    dataset = (torch.arange(50) % 2).view(-1, 1).float()
    tensors = {"X": counts[:50], "dataset": dataset}
    target = module._get_generative_input(tensors, module.inference(counts[:50]))["target"]
    assert (measured[dataset.long().view(-1)].gather(1, target.genes) | ~target.mask).all()
    _, _, loss = module(tensors)
    assert torch.isfinite(loss.loss)
    tensors["dataset"] = torch.full_like(dataset, 5.0)  # a dataset the model was not trained on: every gene counts
    assert module._measured_genes_of(tensors, counts[:50]).all()


def test_train_finds_the_genes_each_dataset_measured(small_adata, tiny: dict) -> None:
    adata = small_adata
    adata.obs["study"] = np.where(adata.obs["donor"].isin(["1015", "1016"]), "first", "second")
    second = (adata.obs["study"] == "second").to_numpy()
    unmeasured = np.arange(0, adata.n_vars, 3)  # the second study did not measure every third gene
    x = adata.X.tolil()
    x[np.ix_(np.flatnonzero(second), unmeasured)] = 0
    adata.X = x.tocsr()
    adata = adata[np.asarray(adata.X.sum(1)).ravel() > 0].copy()
    SCTrilemma.setup_anndata(adata, donor_key="donor", dataset_key="study")
    model = SCTrilemma(adata, preset="small", **tiny)
    model.train(max_steps=3, enable_progress_bar=False)
    measured = model.module.measured_genes.numpy()
    codes = list(model.adata_manager.get_state_registry("dataset").categorical_mapping)
    assert measured.shape == (2, adata.n_vars)
    assert not measured[codes.index("second"), unmeasured].any()
    assert measured[codes.index("second")].sum() > adata.n_vars // 2
    detected = np.asarray((adata[adata.obs["study"] == "first"].X > 0).sum(0)).ravel() > 0
    np.testing.assert_array_equal(measured[codes.index("first")], detected)


def test_one_dataset_counts_every_gene(small_adata, tiny: dict) -> None:
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", **tiny)
    model.train(max_steps=2, enable_progress_bar=False)
    assert model.module.measured_genes is None
