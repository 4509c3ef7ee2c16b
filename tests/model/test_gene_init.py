"""Gene embeddings that start from the data's principal components (``gene_embedding_init``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sctrilemma import SCTrilemma, metrics
from sctrilemma.model._data_setup import principal_gene_loadings
from sctrilemma.module import SCTrilemmaModule
from sctrilemma.module._module import PCA_INIT_MIN_GENES


def test_loadings_are_the_principal_directions_at_unit_scale(small_adata):
    loadings = principal_gene_loadings(small_adata.X, 16)
    n_genes = small_adata.n_vars
    assert loadings.shape == (n_genes, 16)
    assert loadings.dtype == np.float32
    # orthogonal columns with a mean square of one over the genes, the scale of an N(0, 1) start
    np.testing.assert_allclose(loadings.T @ loadings / n_genes, np.eye(16), atol=1e-4)
    # the directions hold far more of the cells' variance than random ones
    centred = np.asarray(metrics.log1p_cp10k(small_adata.X).todense())
    centred -= centred.mean(0)
    random = np.linalg.qr(np.random.default_rng(0).normal(size=(n_genes, 16)))[0]
    assert (centred @ loadings).var(0).sum() / n_genes > 20 * (centred @ random).var(0).sum()
    # fewer cells than components: as many components as the data has
    assert principal_gene_loadings(small_adata.X[:10], 16).shape == (n_genes, 9)
    assert principal_gene_loadings(small_adata.X[:1], 16).shape == (n_genes, 0)
    # a subset of cells, drawn with the seed
    subset = principal_gene_loadings(small_adata.X, 4, max_cells=100, seed=1)
    np.testing.assert_array_equal(subset, principal_gene_loadings(small_adata.X, 4, max_cells=100, seed=1))


def test_auto_starts_from_the_data_only_on_many_genes(tiny):
    assert SCTrilemmaModule(PCA_INIT_MIN_GENES, gene_embedding_init="auto", **tiny).gene_embedding_init == "normal"
    assert SCTrilemmaModule(PCA_INIT_MIN_GENES + 1, gene_embedding_init="auto", **tiny).gene_embedding_init == "pca"
    assert SCTrilemmaModule(10, **tiny).gene_embedding_init == "normal"  # the paper
    with pytest.raises(ValueError, match="`gene_embedding_init` must be 'normal', 'pca' or 'auto'"):
        SCTrilemmaModule(10, gene_embedding_init="svd", **tiny)


def test_training_starts_from_the_loadings_and_load_keeps_the_trained_weights(small_adata, tiny, tmp_path):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    # the example has fewer than 3,000 genes, so the small preset keeps the paper's N(0, 1) start there
    assert SCTrilemma(small_adata, preset="small", **tiny).module.gene_embedding_init == "normal"
    model = SCTrilemma(small_adata, preset="small", gene_embedding_init="pca", **tiny)
    assert model.init_params_["kwargs"]["module_kwargs"]["gene_embedding_init"] == "pca"
    random_start = model.module.gene_embedding.weight.detach().clone()
    expected = principal_gene_loadings(small_adata.X, tiny["n_hidden"])
    # a step at learning rate 0 leaves the weights where training started them
    model.train(max_steps=1, batch_size=32, enable_progress_bar=False, plan_kwargs={"lr": 0.0})
    np.testing.assert_allclose(model.module.gene_embedding.weight.detach().numpy(), expected, rtol=1e-6)
    assert not torch.equal(random_start, torch.from_numpy(expected))
    # a trained model keeps its embeddings when it trains again, is saved or is loaded
    model.train(max_steps=2, batch_size=32, enable_progress_bar=False)
    trained = model.module.gene_embedding.weight.detach().clone()
    assert not torch.equal(trained, torch.from_numpy(expected))
    model.train(max_steps=1, batch_size=32, enable_progress_bar=False, plan_kwargs={"lr": 0.0})
    torch.testing.assert_close(model.module.gene_embedding.weight.detach(), trained, rtol=0, atol=0)
    model.save(tmp_path / "model")
    loaded = SCTrilemma.load(tmp_path / "model", adata=small_adata)
    torch.testing.assert_close(loaded.module.gene_embedding.weight.detach(), trained, rtol=0, atol=0)
