"""scVI's setup, save/load and split conventions: refused covariates, prefixes, saved data, split indices."""

from __future__ import annotations

import os

import numpy as np
import pytest

from sctrilemma import SCTrilemma

SIZES = {"n_hidden": 32, "n_latent_tokens": 4, "crop_size": 64, "n_encoder_layers": 1, "n_decoder_layers": 1}


@pytest.fixture
def adata(small_adata):
    return small_adata[:200].copy()


def _trained(adata, **train_kwargs) -> SCTrilemma:
    SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = SCTrilemma(adata, n_heads=2, **SIZES, preset="paper")
    model.train(max_steps=3, batch_size=64, enable_progress_bar=False, **train_kwargs)
    return model


@pytest.mark.parametrize(
    ("argument", "value"),
    [("batch_key", "donor"), ("labels_key", "cell_type"), ("categorical_covariate_keys", ["donor"])],
)
def test_scvi_covariates_point_to_donor_key(adata, argument, value):
    with pytest.raises(ValueError, match=rf"has no `{argument}` .*donor_key|has no `{argument}`"):
        SCTrilemma.setup_anndata(adata, **{argument: value})
    with pytest.raises(ValueError, match="pass donors as `donor_key`, and studies or technologies as `dataset_key`"):
        SCTrilemma.setup_anndata(adata, batch_key="donor")


def test_training_writes_nothing_to_the_working_directory(adata, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = _trained(adata, check_val_every_n_epoch=1)
    model.save("saved")
    assert sorted(os.listdir(tmp_path)) == ["saved"]
    assert "elbo_train" in model.history


def test_save_anndata_prefix_and_splits_round_trip(adata, tmp_path):
    model = _trained(adata)
    latent = model.get_latent_representation()
    model.save(tmp_path / "out", prefix="run1_", save_anndata=True)
    assert sorted(os.listdir(tmp_path / "out")) == ["run1_adata.h5ad", "run1_model.safetensors"]
    with pytest.raises(FileNotFoundError, match="No sctrilemma reference"):
        SCTrilemma.load(tmp_path / "out")
    loaded = SCTrilemma.load(tmp_path / "out", prefix="run1_")
    assert loaded.adata is not None
    assert loaded.adata.n_obs == adata.n_obs
    np.testing.assert_allclose(loaded.get_latent_representation(), latent, atol=1e-5)
    for name in ("train_indices", "validation_indices", "test_indices"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(model, name))
    assert loaded.train_indices.size > 0
    registry = SCTrilemma.load_registry(tmp_path / "out", prefix="run1_")
    assert registry["setup_args"]["donor_key"] == "donor"
    SCTrilemma.view_setup_args(tmp_path / "out", prefix="run1_")
    with pytest.raises(ValueError, match="`backup_url=.*` is not supported"):
        SCTrilemma.load(tmp_path / "out", prefix="run1_", backup_url="https://example.org/model")


def test_external_indexing_is_honoured(adata):
    train, validation, test = np.arange(0, 120), np.arange(120, 160), np.arange(160, 200)
    model = _trained(adata, datasplitter_kwargs={"external_indexing": [train, validation, test]})
    np.testing.assert_array_equal(np.sort(model.train_indices), train)
    np.testing.assert_array_equal(np.sort(model.validation_indices), validation)
    np.testing.assert_array_equal(np.sort(model.test_indices), test)
