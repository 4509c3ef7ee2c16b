"""scvi-tools 1.4.2 ``tests/model/test_models_with_minified_data.py`` ported to SCTrilemma.

Same calls and assertions with ``batch_key`` -> ``donor_key``, a tiny model and ``synthetic_iid(batch_size=100)``
(200 cells x 100 genes). Adaptations, each commented where it occurs:

- **The cached posterior.** scVI caches ``get_latent_representation(give_mean=False, return_dist=True)``, the
  posterior of its single ``z``. SCTrilemma's pooled posterior cannot drive its decoder, which reads the ``K`` latent
  tokens, so the tests cache ``get_latent_tokens(return_dist=True)`` (``tests/model/test_minify.py`` checks the
  error a scVI user gets with the pooled one).
- ``size_factor_key`` is scVI-only (the likelihood uses each cell's observed total), so the ``use_size_factor=True``
  runs are the same as the plain ones and are not repeated; a batch-free ``transform_batch`` is not passed.
- Where SCTrilemma's methods or messages differ (``get_latent_library_size`` returns the cached observed total;
  ``train`` refuses minified data itself), the assertion checks SCTrilemma's behaviour.

The SCANVI tests (``test_scanvi_*``, ``test_scanvi_from_scvi``) have no counterpart: SCTrilemma has no
semi-supervised model. SCTrilemma's own minification tests are in ``tests/model/test_minify.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
import scvi
from scvi.data import synthetic_iid
from scvi.data._constants import ADATA_MINIFY_TYPE
from scvi.data._utils import _is_minified
from scvi.model.base import BaseMinifiedModeModelClass
from tiny_sizes import TINY

from sctrilemma import SCTrilemma

if TYPE_CHECKING:
    import numpy.typing as npt
    from anndata import AnnData

# scVI uses 400 posterior draws; each costs a full decode here, and the cached path draws the same noise as the
# encoder's path (same seed, same `rsample`), so a few are enough for the tolerance.
N_SAMPLES = 20


@pytest.fixture
def save_path(tmp_path) -> str:
    return str(tmp_path)


def prep_model(layer: str | None = None) -> tuple[SCTrilemma, AnnData, npt.NDArray, AnnData]:
    adata = synthetic_iid(batch_size=100)
    counts = adata.X
    if layer is not None:
        adata.layers[layer] = adata.X.copy()
        adata.X = np.zeros_like(adata.X)

    adata_before_setup = adata.copy()

    SCTrilemma.setup_anndata(adata, layer=layer, donor_key="batch")

    model = SCTrilemma(adata, **TINY, preset="paper")
    model.train(1, check_val_every_n_epoch=1, train_size=0.5)

    lib_size = np.squeeze(np.asarray(counts.sum(axis=-1)))

    return model, adata, lib_size, adata_before_setup


def assert_approx_equal(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def run_test_for_model_with_minified_adata(n_samples: int = 1, give_mean: bool = False, layer: str | None = None):
    model, adata, adata_lib_size, _ = prep_model(layer)

    scvi.settings.seed = 1
    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv
    scvi.settings.seed = 1
    params_orig = model.get_likelihood_parameters(n_samples=n_samples, give_mean=give_mean)
    adata_orig = adata.copy()

    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR
    assert model.adata_manager.registry is model.registry_

    assert not _is_minified(adata)
    assert adata is not model.adata

    orig_obs_df = adata_orig.obs
    orig_obs_df[BaseMinifiedModeModelClass._OBSERVED_LIB_SIZE_KEY] = adata_lib_size
    assert model.adata.obs.equals(orig_obs_df)
    assert model.adata.var_names.equals(adata_orig.var_names)
    assert model.adata.var.equals(adata_orig.var)

    scvi.settings.seed = 1
    keys = ["mean", "dispersions", "dropout"]
    params_latent = model.get_likelihood_parameters(n_samples=n_samples, give_mean=give_mean)
    for k in keys:
        assert params_latent[k].shape == params_orig[k].shape

    for k in keys:
        assert_approx_equal(params_latent[k], params_orig[k])


def test_scvi_with_minified_adata_one_sample():
    run_test_for_model_with_minified_adata()


def test_scvi_with_minified_adata_one_sample_with_layer():
    run_test_for_model_with_minified_adata(layer="data_layer")


def test_scvi_with_minified_adata_n_samples():
    run_test_for_model_with_minified_adata(n_samples=N_SAMPLES, give_mean=True)


def test_scvi_with_minified_adata_get_normalized_expression():
    model, adata, _, _ = prep_model()

    scvi.settings.seed = 1
    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv

    scvi.settings.seed = 1
    exprs_orig = model.get_normalized_expression()

    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    scvi.settings.seed = 1
    exprs_new = model.get_normalized_expression()
    assert exprs_new.shape == adata.shape

    np.testing.assert_allclose(exprs_new, exprs_orig, rtol=1e-5, atol=1e-6)


def test_scvi_with_minified_adata_get_normalized_expression_non_default_gene_list():
    model, adata, _, _ = prep_model()

    # non-default gene list and n_samples > 1
    gl = adata.var_names[:5].to_list()
    n_samples = 10

    scvi.settings.seed = 1
    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv

    scvi.settings.seed = 1
    exprs_orig = model.get_normalized_expression(gene_list=gl, n_samples=n_samples, library_size="latent")

    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    scvi.settings.seed = 1
    exprs_new = model.get_normalized_expression(
        gene_list=gl, n_samples=n_samples + 1, return_mean=False, library_size="latent"
    )
    exprs_new = exprs_new[1:].mean(0)

    assert exprs_new.shape == (adata.shape[0], 5)
    # Means of 10 posterior draws each, 9 of them shared (draws 2-10 of the same seeded stream): close, not equal.
    np.testing.assert_allclose(exprs_new, exprs_orig, rtol=0.2, atol=0)


def test_validate_unsupported_if_minified():
    model, _, lib_size, _ = prep_model()

    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv

    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    common_err_msg = "The {} function currently does not support minified data."

    with pytest.raises(ValueError) as e:
        model.get_elbo()
    assert str(e.value) == common_err_msg.format("VAEMixin.get_elbo")

    with pytest.raises(ValueError) as e:
        model.get_reconstruction_error()
    assert str(e.value) == common_err_msg.format("VAEMixin.get_reconstruction_error")

    with pytest.raises(ValueError) as e:
        model.get_marginal_ll()
    assert str(e.value) == common_err_msg.format("VAEMixin.get_marginal_ll")

    # scVI refuses get_latent_library_size (its library may be latent). SCTrilemma's library is the observed total,
    # which the minified data caches, so it is returned.
    np.testing.assert_array_equal(model.get_latent_library_size().ravel(), lib_size)

    # scVI's train fails in VAE.loss; SCTrilemma's train refuses first (the encoder would change under the cache),
    # naming the fix, and its module's loss refuses as VAE.loss does.
    with pytest.raises(ValueError) as e:
        model.train()
    assert str(e.value).startswith(common_err_msg.format("SCTrilemma.train"))
    tensors = next(iter(model._make_data_loader(adata=model.adata, batch_size=8)))
    with pytest.raises(ValueError) as e:
        model.module(tensors)
    assert str(e.value) == common_err_msg.format("SCTrilemmaModule.loss")


def test_validate_supported_if_minified_keep_count():
    # scVI marks this test `optional` (a marker SCTrilemma does not register).
    model, _, _, _ = prep_model()
    model2, _, _, _ = prep_model()

    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv

    model.minify_adata(minified_data_type="latent_posterior_parameters_with_counts")
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR_WITH_COUNTS
    assert model2.minified_data_type is None

    assert np.allclose(model2.get_elbo().cpu(), model.get_elbo().cpu(), rtol=5e-2)
    assert np.allclose(
        model2.get_reconstruction_error()["reconstruction_loss"].cpu(),
        model.get_reconstruction_error()["reconstruction_loss"].cpu(),
        rtol=5e-2,
    )
    # scVI's default 1,000 importance samples each decode every gene here; 20 keep the test fast.
    assert np.allclose(model2.get_marginal_ll(n_mc_samples=20), model.get_marginal_ll(n_mc_samples=20), rtol=5e-2)

    # scVI trains on the cache (its encoder gets no gradient). SCTrilemma's loss runs the encoder on the counts, so
    # training would leave the cache stale: it is refused. `update_only_decoder` and SCANVI have no counterpart.
    with pytest.raises(ValueError, match="does not support minified data"):
        model.train(1, check_val_every_n_epoch=1, train_size=0.5)


def test_scvi_with_minified_adata_save_then_load(save_path):
    # create a model and minify its adata, then save it and its adata.
    # Load it back up using the same (minified) adata. Validate that the
    # loaded model has the minified_data_type attribute set as expected.
    model, adata, _, _ = prep_model()

    scvi.settings.seed = 1
    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv

    scvi.settings.seed = 1
    params_orig = model.get_likelihood_parameters()

    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    model.save(save_path, overwrite=True, save_anndata=True)
    # load saved model with saved (minified) adata
    loaded_model = SCTrilemma.load(save_path)

    assert loaded_model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    scvi.settings.seed = 1
    params_latent = loaded_model.get_likelihood_parameters()
    assert params_latent["mean"].shape == adata.shape
    np.testing.assert_allclose(params_latent["mean"], params_orig["mean"], rtol=1e-5, atol=1e-6)


def test_scvi_with_minified_adata_save_then_load_with_non_minified_adata(save_path):
    # create a model and minify its adata, then save it and its adata.
    # Load it back up using a non-minified adata. Validate that the
    # loaded model does not has the minified_data_type attribute set.
    model, adata, _, adata_before_setup = prep_model()

    scvi.settings.seed = 1
    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv

    scvi.settings.seed = 1
    params_orig = model.get_likelihood_parameters()

    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    model.save(save_path, overwrite=True, save_anndata=True)
    # load saved model with a non-minified adata
    loaded_model = SCTrilemma.load(save_path, adata=adata_before_setup)

    assert loaded_model.minified_data_type is None

    scvi.settings.seed = 1
    params_new = loaded_model.get_likelihood_parameters()
    assert params_new["mean"].shape == adata.shape
    np.testing.assert_array_equal(params_new["mean"], params_orig["mean"])


def test_scvi_save_then_load_with_minified_adata(save_path):
    # create a model, then save it and its adata (non-minified).
    # Load it back up using a minified adata. Validate that this
    # fails, as expected because we don't have a way to validate
    # whether the minified-adata was set up correctly
    model, _, _, _ = prep_model()

    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv

    model.save(save_path, overwrite=True, save_anndata=True)

    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    # loading this model with a minified adata is not allowed because
    # we don't have a way to validate whether the minified-adata was
    # set up correctly
    with pytest.raises(ValueError) as excinfo:
        SCTrilemma.load(save_path, adata=model.adata)
    assert str(excinfo.value) == "It appears you are trying to load a non-minified model with minified adata"


def test_scvi_with_minified_adata_get_latent_representation():
    model, _, _, _ = prep_model()

    scvi.settings.seed = 1
    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv

    scvi.settings.seed = 1
    latent_repr_orig = model.get_latent_representation()

    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    scvi.settings.seed = 1
    latent_repr_new = model.get_latent_representation()

    np.testing.assert_array_equal(latent_repr_new, latent_repr_orig)


def test_scvi_with_minified_adata_posterior_predictive_sample():
    model, _, _, _ = prep_model()

    scvi.settings.seed = 1
    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv

    scvi.settings.seed = 1
    sample_orig = model.posterior_predictive_sample(indices=[1, 2, 3], gene_list=["gene_1", "gene_2"])

    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    scvi.settings.seed = 1
    sample_new = model.posterior_predictive_sample(indices=[1, 2, 3], gene_list=["gene_1", "gene_2"])
    assert sample_new.shape == (3, 2)

    np.testing.assert_array_equal(sample_new.todense(), sample_orig.todense())


def test_scvi_with_minified_adata_get_feature_correlation_matrix():
    model, _, _, _ = prep_model()

    scvi.settings.seed = 1
    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv

    # transform_batch=["batch_0", "batch_1"] is not passed: SCTrilemma has no batch covariate to transform.
    scvi.settings.seed = 1
    fcm_orig = model.get_feature_correlation_matrix(correlation_type="pearson", n_samples=1)

    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    scvi.settings.seed = 1
    fcm_new = model.get_feature_correlation_matrix(correlation_type="pearson", n_samples=1)

    assert_approx_equal(fcm_new, fcm_orig)


def test_scvi_minified_model_load_with_user_provided_minified_adata(save_path):
    """Loading a minified model with user-provided minified adata (the cellxgene census model notebook's workflow)."""
    model, adata, _, _ = prep_model()

    scvi.settings.seed = 1
    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    model.adata.obsm["X_latent_qzm"] = qzm
    model.adata.obsm["X_latent_qzv"] = qzv

    model.minify_adata()
    assert model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    minified_adata = model.adata.copy()

    model.save(save_path, overwrite=True, save_anndata=True)

    loaded_model = SCTrilemma.load(save_path, adata=minified_adata)

    assert loaded_model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    scvi.settings.seed = 1
    params = loaded_model.get_likelihood_parameters()
    assert params["mean"].shape == minified_adata.shape


def test_scvi_non_minified_model_load_with_adata_having_latent_params(save_path):
    """A non-minified model loaded with count-free data holding latent params, then minified (census notebook)."""
    from scipy import sparse

    model, adata, _, adata_before_setup = prep_model()

    qzm, qzv = model.get_latent_tokens(return_dist=True)  # the tokens' posterior, not the pooled one
    adata.obsm["_scvi_latent_qzm"] = qzm
    adata.obsm["_scvi_latent_qzv"] = qzv

    model.save(save_path, overwrite=True, save_anndata=False)

    minified_like_adata = adata.copy()
    minified_like_adata.X = sparse.csr_matrix(minified_like_adata.X.shape)  # empty sparse matrix

    loaded_model = SCTrilemma.load(save_path, adata=minified_like_adata)

    # The data has no counts, so the cached observed library is 0 (as in scVI); SCTrilemma warns.
    with pytest.warns(UserWarning, match="200 of 200 cells have no counts"):
        loaded_model.minify_adata(
            use_latent_qzm_key="_scvi_latent_qzm",
            use_latent_qzv_key="_scvi_latent_qzv",
        )

    assert loaded_model.minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR

    scvi.settings.seed = 1
    params = loaded_model.get_likelihood_parameters()
    assert params["mean"].shape == adata.shape
