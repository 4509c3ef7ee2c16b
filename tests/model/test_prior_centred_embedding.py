"""The small preset's embedding: the pooled posterior mean minus the PB-Cond prior mean of the cell's group."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sctrilemma import SCTrilemma
from sctrilemma.io._reference import read_reference


@pytest.fixture
def small_model(small_adata, tiny) -> SCTrilemma:
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", **tiny)
    model.train(max_steps=6, batch_size=64, enable_progress_bar=False)
    return model


def _prior_means_by_hand(model: SCTrilemma, adata) -> np.ndarray:
    """Each cell's prior mean, from its donor's code in ``get_pseudobulk_codes`` and the prior's mean map."""
    codes = model.get_pseudobulk_codes(adata).droplevel("dataset")
    columns = [c for c in codes.columns if c.startswith("code_")]
    cell_codes = codes.loc[adata.obs["donor"].astype(str), columns].to_numpy(np.float32)
    width = model.module.prior.to_mean.in_features
    padded = np.zeros((cell_codes.shape[0], width), dtype=np.float32)
    padded[:, : cell_codes.shape[1]] = cell_codes
    with torch.no_grad():
        return model.module.prior.to_mean(torch.as_tensor(padded)).numpy()


def test_small_preset_centres_the_embedding_on_each_groups_prior_mean(small_model: SCTrilemma, small_adata):
    assert small_model.module.embedding_centred_on_prior
    pooled = small_model.get_latent_tokens().mean(axis=1)
    prior_means = _prior_means_by_hand(small_model, small_adata)
    assert np.linalg.norm(prior_means - prior_means.mean(0), axis=1).max() > 0  # the donors' priors differ
    embedding = small_model.get_latent_representation()
    np.testing.assert_allclose(embedding, pooled - prior_means, atol=1e-5)
    # a subset, in another batch size: each cell keeps its own shift
    cells = np.arange(7, 300, 3)
    np.testing.assert_allclose(
        small_model.get_latent_representation(indices=cells, batch_size=17), embedding[cells], atol=1e-5
    )
    # the pooled posterior's mean moves with it; its variance does not
    mean, variance = small_model.get_latent_representation(return_dist=True)
    np.testing.assert_allclose(mean, embedding, atol=1e-5)
    small_model.module.embedding_centred_on_prior = False
    raw_mean, raw_variance = small_model.get_latent_representation(return_dist=True)
    np.testing.assert_allclose(raw_mean, pooled, atol=1e-5)
    np.testing.assert_allclose(variance, raw_variance, rtol=1e-6)


def test_distances_within_a_donor_are_those_of_the_posterior_mean(small_model: SCTrilemma, small_adata):
    centred = small_model.get_latent_representation()
    small_model.module.embedding_centred_on_prior = False
    raw = small_model.get_latent_representation()
    donors = small_adata.obs["donor"].to_numpy()
    same = donors == donors[0]

    def within(embedding: np.ndarray) -> np.ndarray:
        return np.linalg.norm(embedding[same][:, None] - embedding[same][None], axis=-1)

    np.testing.assert_allclose(within(centred), within(raw), atol=1e-4)
    across = np.linalg.norm(centred[same][:20, None] - centred[~same][None, :20], axis=-1)
    assert not np.allclose(across, np.linalg.norm(raw[same][:20, None] - raw[~same][None, :20], axis=-1))


def test_the_paper_preset_reports_the_posterior_mean(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="paper", **tiny)
    model.train(max_steps=2, batch_size=64, enable_progress_bar=False)
    assert not model.module.embedding_centred_on_prior
    np.testing.assert_allclose(model.get_latent_representation(), model.get_latent_tokens().mean(axis=1), atol=1e-5)


def test_minified_data_embeds_as_the_full_data(small_model: SCTrilemma):
    before = small_model.get_latent_representation()
    small_model.minify_adata()
    assert "sctrilemma_pseudobulk_codes" in small_model.adata.obsm
    np.testing.assert_allclose(small_model.get_latent_representation(), before, atol=1e-5)


def test_a_query_of_the_same_cells_embeds_as_the_reference(small_model: SCTrilemma, small_adata, tmp_path):
    small_model.save(tmp_path / "reference")
    query = SCTrilemma.load_query_data(small_adata.copy(), tmp_path / "reference")
    np.testing.assert_allclose(query.get_latent_representation(), small_model.get_latent_representation(), atol=1e-5)


def test_models_saved_before_the_setting_keep_the_posterior_mean(small_model: SCTrilemma, tmp_path):
    small_model.save(tmp_path / "reference")
    reference = read_reference(tmp_path / "reference")
    del reference.metadata["config"]["kwargs"]["module_kwargs"]["embedding_centred_on_prior"]
    older = SCTrilemma._from_parts(reference.module_state, reference.metadata)
    assert not older.module.embedding_centred_on_prior
    assert SCTrilemma.load(tmp_path / "reference").module.embedding_centred_on_prior
