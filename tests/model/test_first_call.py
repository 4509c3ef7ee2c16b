"""`SCTrilemma(adata).train()` on a machine without a GPU: a preset that fits, a batch that fits, never a crash."""

from __future__ import annotations

import pytest
import torch

from sctrilemma import SCTrilemma
from sctrilemma.model import _presets
from sctrilemma.model._presets import optimizer_bytes, training_bytes_per_cell


@pytest.mark.parametrize("cuda", [False, True])
def test_the_default_preset_is_small_whether_or_not_a_gpu_is_visible(small_adata, monkeypatch, recwarn, cuda):
    """The device chooses precision and kernels, never the model: the same configuration with and without CUDA."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata)
    assert model._preset == "small"
    assert model.module.n_hidden == 64
    assert model.init_params_["non_kwargs"]["preset"] == "small"  # saved models keep the preset
    assert not [w for w in recwarn if "preset" in str(w.message)]
    explicit = SCTrilemma(small_adata, preset="small")
    assert model.init_params_ == explicit.init_params_
    assert sum(p.numel() for p in model.module.parameters()) == sum(p.numel() for p in explicit.module.parameters())


def test_explicit_preset_is_kept_without_a_gpu(small_adata, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    assert SCTrilemma(small_adata, preset="paper").module.n_hidden == 512


def test_batch_shrinks_to_the_memory_available(small_adata, tiny, monkeypatch):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    per_cell = training_bytes_per_cell(model.module, small_adata.n_vars)
    fitting = 20
    available = ((fitting + 0.5) * per_cell + optimizer_bytes(model.module)) / _presets.MEMORY_SHARE
    monkeypatch.setattr(_presets, "available_memory_bytes", lambda: int(available))
    with pytest.warns(UserWarning, match=f"training with batch_size={fitting} instead"):
        model.train(max_steps=2, batch_size=256, accelerator="cpu", enable_progress_bar=False)
    assert model.is_trained_
    assert model.trainer.train_dataloader.sampler.batch_size == fitting


def test_a_batch_that_fits_is_kept(small_adata, tiny, monkeypatch, recwarn):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    monkeypatch.setattr(_presets, "available_memory_bytes", lambda: 2**40)
    model.train(max_steps=2, batch_size=32, accelerator="cpu", enable_progress_bar=False)
    assert model.trainer.train_dataloader.sampler.batch_size == 32
    assert not [w for w in recwarn if "batch_size=" in str(w.message)]


def test_a_model_that_cannot_fit_one_cell_is_refused_before_training(small_adata, tiny, monkeypatch):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    weights = {name: value.clone() for name, value in model.module.state_dict().items()}
    monkeypatch.setattr(_presets, "available_memory_bytes", lambda: 1)
    with pytest.raises(MemoryError, match="preset='small'"):
        model.train(max_steps=2, accelerator="cpu", enable_progress_bar=False)
    assert not model.is_trained_
    for name, value in model.module.state_dict().items():
        assert torch.equal(value, weights[name]), name


def test_the_estimate_grows_with_the_genes_each_cell_passes_through(small_adata):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    paper = SCTrilemma(small_adata, preset="paper").module  # encodes and reconstructs a crop of up to 4,096 genes
    small = SCTrilemma(small_adata, preset="small").module  # encodes 256 genes, reconstructs a sample of 512
    assert training_bytes_per_cell(paper, 4_000) > 1.5 * training_bytes_per_cell(paper, 2_000)
    assert training_bytes_per_cell(paper, 20_000) == training_bytes_per_cell(paper, 4_096)
    assert training_bytes_per_cell(small, 20_000) == training_bytes_per_cell(small, 2_000)
    assert training_bytes_per_cell(paper, 2_000) > 100 * training_bytes_per_cell(small, 2_000)
    assert _presets.available_memory_bytes() is None or _presets.available_memory_bytes() > 0
