"""SCTrilemma's latent-mode minification beyond scVI's tests: token posteriors, refusals, leaving minified mode.

scvi-tools' own tests, ported, are in ``tests/model/scvi_port/test_models_with_minified_data.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scvi
from scvi.data import synthetic_iid
from scvi.data._constants import _ADATA_MINIFY_TYPE_UNS_KEY, ADATA_MINIFY_TYPE
from scvi.data._utils import _is_minified

from sctrilemma import SCTrilemma


def prep_model():
    """A tiny model trained one epoch on 200 synthetic cells, its AnnData, library sizes and a set-up-free copy."""
    adata = synthetic_iid(batch_size=100)
    adata_before_setup = adata.copy()
    SCTrilemma.setup_anndata(adata, donor_key="batch")
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
    model.train(1, train_size=0.5)
    return model, adata, np.asarray(adata.X.sum(axis=-1)).ravel(), adata_before_setup


def test_pooled_posterior_is_refused():
    """scVI's workflow caches the pooled posterior, which cannot drive the decoder: the error names the fix."""
    model, _, _, _ = prep_model()
    qzm, qzv = model.get_latent_representation(give_mean=False, return_dist=True)
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv
    with pytest.raises(ValueError, match=r"pooled posterior.*get_latent_tokens\(return_dist=True\)"):
        model.minify_adata()
    assert model.minified_data_type is None
    del model.adata.obsm["X_latent_qzv"]
    with pytest.raises(ValueError, match="has 'X_latent_qzm' but not 'X_latent_qzv'"):
        model.minify_adata()
    model.adata.obsm["X_latent_qzm"], model.adata.obsm["X_latent_qzv"] = model.get_latent_tokens(return_dist=True)
    model.adata.obsm["X_latent_qzv"] = np.log(model.adata.obsm["X_latent_qzv"])
    with pytest.raises(ValueError, match="positive, finite variances"):
        model.minify_adata()
    with pytest.raises(NotImplementedError, match="not supported"):
        model.minify_adata(minified_data_type="counts")


def test_minify_computes_token_posteriors_and_keeps_user_data():
    """Without the keys, `minify_adata` caches `get_latent_tokens(return_dist=True)`; the user's AnnData is unchanged."""
    model, adata, lib_size, adata_before_setup = prep_model()
    qzm, qzv = model.get_latent_tokens(return_dist=True)
    expression = model.get_normalized_expression(library_size="latent")
    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR
    assert not _is_minified(adata)
    assert set(adata.obsm) == set(adata_before_setup.obsm)
    assert model.adata.X.nnz == 0
    np.testing.assert_array_equal(model.adata.obsm["sctrilemma_latent_qzm"], qzm.reshape(adata.n_obs, -1))
    np.testing.assert_array_equal(model.adata.obsm["sctrilemma_latent_qzv"], qzv.reshape(adata.n_obs, -1))
    np.testing.assert_array_equal(model.adata.obs["observed_lib_size"], lib_size)
    assert "200 minified cells" in repr(model)
    assert model.module.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR
    # The cache reproduces the decoder's output exactly (posterior mean tokens, cached observed total).
    np.testing.assert_allclose(model.get_normalized_expression(library_size="latent"), expression, rtol=1e-5)
    means, variances = model.get_latent_tokens(return_dist=True)
    np.testing.assert_array_equal(means, qzm)
    np.testing.assert_allclose(variances, qzv, rtol=1e-5)
    with pytest.raises(ValueError, match="already minified"):
        model.minify_adata()
    with pytest.raises(ValueError, match="pseudo-bulk codes need counts"):
        model.get_pseudobulk_codes()


def test_full_data_reattached_after_minification():
    """Attaching the full data again leaves minified mode: the encoder runs and training works."""
    model, _, _, adata_before_setup = prep_model()
    latent = model.get_latent_representation()
    model.minify_adata()
    model.adata = adata_before_setup
    assert model.minified_data_type is None
    assert model.module.minified_data_type is None
    np.testing.assert_array_equal(model.get_latent_representation(), latent)
    model.train(1, train_size=0.5)
    assert model.is_trained


def test_minified_data_type_with_counts_keeps_counts():
    """With counts kept, the ELBO runs the encoder on them and equals the full data's."""
    model, adata, _, _ = prep_model()
    scvi.settings.seed = 1
    elbo = model.get_elbo()
    model.minify_adata(minified_data_type=ADATA_MINIFY_TYPE.LATENT_POSTERIOR_WITH_COUNTS)
    np.testing.assert_array_equal(np.asarray(model.adata.X), np.asarray(adata.X))
    assert model.adata.uns[_ADATA_MINIFY_TYPE_UNS_KEY] == ADATA_MINIFY_TYPE.LATENT_POSTERIOR_WITH_COUNTS
    scvi.settings.seed = 1  # the reconstruction is scored on a random crop
    np.testing.assert_allclose(model.get_elbo(), elbo, rtol=1e-5)
