"""scVI's RNASeqMixin methods on SCTrilemma: values consistent with the all-gene ZINB and the observed library."""

from __future__ import annotations

import numpy as np
import pytest

from sctrilemma import SCTrilemma


@pytest.fixture(scope="module")
def model(_example) -> SCTrilemma:
    import scvi

    adata = _example[:200].copy()
    scvi.settings.seed = 0
    SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = SCTrilemma(
        adata,
        n_hidden=32,
        n_latent_tokens=4,
        crop_size=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_heads=2,
        preset="paper",
    )
    model.train(max_steps=5, batch_size=64, enable_progress_bar=False)
    return model


def test_likelihood_parameters_and_library(model: SCTrilemma):
    counts = model.adata.X.toarray()[:10]
    library = model.get_latent_library_size(indices=np.arange(10))
    np.testing.assert_allclose(library.ravel(), counts.sum(1))
    params = model.get_likelihood_parameters(indices=np.arange(10))
    np.testing.assert_allclose(params["mean"].sum(1), counts.sum(1), rtol=1e-4)
    proportions = model.get_normalized_expression(indices=np.arange(10), return_numpy=True)
    np.testing.assert_allclose(params["mean"], proportions * counts.sum(1, keepdims=True), rtol=1e-4)
    assert ((params["dropout"] > 0) & (params["dropout"] < 1)).all()
    assert (params["dispersions"] > 0).all()


def test_predictive_samples_and_marginal_ll(model: SCTrilemma):
    samples = model.posterior_predictive_sample(indices=np.arange(8), n_samples=2)
    assert samples.shape == (8, model.adata.n_vars, 2)
    dense = samples.todense()
    assert (dense >= 0).all()
    assert np.array_equal(dense, np.round(dense))
    marginal = model.get_marginal_ll(indices=np.arange(8), n_mc_samples=4, return_mean=False)
    assert marginal.shape == (8,)
    assert np.isfinite(marginal.numpy()).all()
    assert (marginal.numpy() < 0).all()
    correlation = model.get_feature_correlation_matrix(indices=np.arange(8), n_samples=2)
    assert correlation.shape == (model.adata.n_vars, model.adata.n_vars)


def test_importance_weights_are_refused(model: SCTrilemma):
    with pytest.raises(ValueError, match="`weights='importance'` is not supported"):
        model.differential_expression(idx1=np.arange(5), idx2=np.arange(5, 10), weights="importance")
