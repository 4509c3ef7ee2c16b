"""The small preset's embedding: the pooled posterior mean minus the mean PB-Cond prior mean of the cell's dataset."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sctrilemma import SCTrilemma
from sctrilemma.io._reference import read_reference


@pytest.fixture
def two_study_adata(small_adata):
    """The small data with its five donors split into two studies (two donors and three)."""
    donors = sorted(small_adata.obs["donor"].astype(str).unique())
    small_adata.obs["study"] = np.where(small_adata.obs["donor"].astype(str).isin(donors[:2]), "A", "B")
    return small_adata


@pytest.fixture
def small_model(two_study_adata, tiny) -> SCTrilemma:
    SCTrilemma.setup_anndata(two_study_adata, donor_key="donor", dataset_key="study")
    model = SCTrilemma(two_study_adata, preset="small", **tiny)
    model.train(max_steps=6, batch_size=64, enable_progress_bar=False)
    return model


def _prior_means_by_hand(model: SCTrilemma, adata) -> np.ndarray:
    """Each cell's prior mean, from its group's code in ``get_pseudobulk_codes`` and the prior's mean map."""
    codes = model.get_pseudobulk_codes(adata)
    columns = [c for c in codes.columns if c.startswith("code_")]
    groups = list(zip(adata.obs["study"].astype(str), adata.obs["donor"].astype(str), strict=True))
    cell_codes = codes.loc[groups, columns].to_numpy(np.float32)
    width = model.module.prior.to_mean.in_features
    padded = np.zeros((cell_codes.shape[0], width), dtype=np.float32)
    padded[:, : cell_codes.shape[1]] = cell_codes
    with torch.no_grad():
        return model.module.prior.to_mean(torch.as_tensor(padded)).numpy()


def test_small_preset_centres_the_embedding_on_each_datasets_prior_mean(small_model: SCTrilemma, two_study_adata):
    assert small_model.module.embedding_centred_on_prior
    pooled = small_model.get_latent_tokens().mean(axis=1)
    prior_means = _prior_means_by_hand(small_model, two_study_adata)
    studies = two_study_adata.obs["study"].to_numpy()
    dataset_means = np.empty_like(prior_means)
    for study in np.unique(studies):
        dataset_means[studies == study] = prior_means[studies == study].mean(0)
    assert np.linalg.norm(dataset_means[studies == "A"][0] - dataset_means[studies == "B"][0]) > 0
    embedding = small_model.get_latent_representation()
    np.testing.assert_allclose(embedding, pooled - dataset_means, atol=1e-5)
    # a subset, in another batch size: each cell keeps its dataset's shift over all the data's cells
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


def test_distances_within_a_dataset_are_those_of_the_posterior_mean(small_model: SCTrilemma, two_study_adata):
    centred = small_model.get_latent_representation()
    small_model.module.embedding_centred_on_prior = False
    raw = small_model.get_latent_representation()
    same = two_study_adata.obs["study"].to_numpy() == "B"  # three donors

    def distances(embedding: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        return np.linalg.norm(embedding[rows][:40, None] - embedding[columns][None, :40], axis=-1)

    within = np.flatnonzero(same)[::3]  # cells of several donors
    np.testing.assert_allclose(distances(centred, within, within), distances(raw, within, within), atol=1e-4)
    assert not np.allclose(distances(centred, same, ~same), distances(raw, same, ~same))


def test_one_dataset_moves_every_cell_by_the_same_vector(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", **tiny)
    model.train(max_steps=6, batch_size=64, enable_progress_bar=False)
    shift = model.get_latent_tokens().mean(axis=1) - model.get_latent_representation()
    np.testing.assert_allclose(shift, np.broadcast_to(shift[0], shift.shape), atol=1e-5)
    assert np.abs(shift[0]).max() > 0


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
