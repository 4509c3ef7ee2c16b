"""scvi-tools 1.4.2 ``tests/model/test_scvi.py`` ported to SCTrilemma.

Same calls and assertions with ``batch_key`` -> ``donor_key``, a tiny model and ``synthetic_iid(batch_size=100)``
(200 cells x 100 genes). Checks that need a batch covariate (``transform_batch`` with effect, batch embeddings),
labels, scVI-only likelihood or library options, or scVI's pickle formats are skipped with the reason. Tests of
options SCTrilemma does not have are left out: importance-weighted DE (it needs scVI's per-cell importance weights of
z), extra categorical or continuous covariates, per-batch/label/cell dispersion, and batch embeddings.
"""

from __future__ import annotations

import os

import anndata
import numpy as np
import pytest
import scipy.sparse as sp
import scvi
import torch
from scvi.data import _constants, synthetic_iid
from tiny_sizes import TINY

from sctrilemma import SCTrilemma

N_LATENT = TINY["n_hidden"]  # the cell embedding's width


def _synthetic(**kwargs) -> anndata.AnnData:
    return synthetic_iid(batch_size=100, **kwargs)


def _model(adata: anndata.AnnData, **kwargs) -> SCTrilemma:
    return SCTrilemma(adata, **{**TINY, **kwargs}, preset="paper")


@pytest.fixture
def save_path(tmp_path):
    return str(tmp_path)


def test_saving_and_loading(save_path):
    def test_save_load_model(cls, adata, save_path, prefix=None):
        cls.setup_anndata(adata, donor_key="batch")
        model = _model(adata)
        model.train(1, train_size=0.2)
        z1 = model.get_latent_representation(adata)
        test_idx1 = model.validation_indices
        model.save(save_path, overwrite=True, save_anndata=True, prefix=prefix)
        model.view_setup_args(save_path, prefix=prefix)
        model = cls.load(save_path, prefix=prefix)
        model.get_latent_representation()

        adata2 = _synthetic()
        model2 = cls.load(save_path, prefix=prefix)
        model2.get_latent_representation(adata2)

        # Load with mismatched genes.
        tmp_adata = _synthetic(n_genes=200)
        with pytest.raises(ValueError):
            cls.load(save_path, adata=tmp_adata, prefix=prefix)

        # "Load with different batches" raises in scVI; donors are PB-Cond groups and new donors get codes from
        # the frozen codebook, so SCTrilemma accepts them (tests/model/test_pseudobulk_prior.py).

        model = cls.load(save_path, adata=adata, prefix=prefix)
        assert "donor" in model.adata_manager.data_registry

        z2 = model.get_latent_representation()
        test_idx2 = model.validation_indices
        np.testing.assert_allclose(z1, z2, atol=1e-5)
        np.testing.assert_array_equal(test_idx1, test_idx2)
        assert model.is_trained is True
        # Legacy loading (pickle-based `model_params.pt`/`attr.pkl`, `convert_legacy_save`) is not ported:
        # SCTrilemma never unpickles (tests/io/test_reference.py::test_malicious_pickle_is_never_unpickled).

    save_path = os.path.join(save_path, "tmp")
    adata = _synthetic()
    test_save_load_model(SCTrilemma, adata, save_path, prefix=f"{SCTrilemma.__name__}_")


@pytest.mark.parametrize("gene_likelihood", ["nb", "poisson", "normal"])
def test_scvi_other_likelihoods(gene_likelihood: str):
    """scVI's other likelihoods are not options: SCTrilemma's likelihood is always ZINB."""
    adata = _synthetic()
    SCTrilemma.setup_anndata(adata, donor_key="batch")
    with pytest.raises(TypeError, match="gene_likelihood"):
        _model(adata, gene_likelihood=gene_likelihood)
    assert _model(adata).module.gene_likelihood == "zinb"


def test_scvi():
    n_latent = N_LATENT
    # size_factor_key is scVI-only (the likelihood uses each cell's observed total): not ported.
    adata = _synthetic()
    SCTrilemma.setup_anndata(adata, donor_key="batch")
    model = _model(adata)
    model.train(1, check_val_every_n_epoch=1, train_size=0.5)
    assert model.get_elbo().ndim == 0
    assert model.get_elbo(return_mean=False).shape == (adata.n_obs,)
    assert np.ndim(model.get_marginal_ll(n_mc_samples=3)) == 0
    assert model.get_marginal_ll(n_mc_samples=3, return_mean=False).shape == (adata.n_obs,)
    assert model.get_reconstruction_error()["reconstruction_loss"].ndim == 0
    assert model.get_reconstruction_error(return_mean=False)["reconstruction_loss"].shape == (adata.n_obs,)
    # transform_batch is accepted and has no effect (no batch covariate)
    assert model.get_normalized_expression(transform_batch="batch_1").shape == (adata.n_obs, adata.n_vars)
    np.testing.assert_array_equal(
        model.get_normalized_expression(transform_batch="batch_1"), model.get_normalized_expression()
    )
    assert model.get_normalized_expression(n_samples=2).shape == (adata.n_obs, adata.n_vars)

    # "Test without an observed lib size" (use_observed_lib_size=False, var_activation) is scVI-only.
    model.train(1, check_val_every_n_epoch=1, train_size=0.5)
    print(model)
    model.view_anndata_setup()
    model.view_anndata_setup(hide_state_registries=True)

    assert model.is_trained is True
    z = model.get_latent_representation()
    assert z.shape == (adata.shape[0], n_latent)
    assert len(model.history["elbo_train"]) == 2
    model.get_elbo()
    model.get_elbo(return_mean=False)
    model.get_marginal_ll(n_mc_samples=3)
    model.get_marginal_ll(n_mc_samples=3, return_mean=False)
    model.get_reconstruction_error()
    model.get_reconstruction_error(return_mean=False)
    model.get_normalized_expression(n_samples=2)

    adata2 = _synthetic()
    with pytest.raises(ValueError):
        model.view_anndata_setup(adata=adata2)
    with pytest.raises(ValueError):
        model.view_anndata_setup(adata=adata2, hide_state_registries=True)
    model.get_elbo(adata2)
    model.get_marginal_ll(adata2, n_mc_samples=3)
    model.get_reconstruction_error(adata2)
    latent = model.get_latent_representation(adata2, indices=[1, 2, 3])
    assert latent.shape == (3, n_latent)
    denoised = model.get_normalized_expression(adata2)
    assert denoised.shape == adata.shape
    model.view_anndata_setup(adata=adata2)
    model.view_anndata_setup(adata=adata2, hide_state_registries=True)

    denoised = model.get_normalized_expression(adata2, indices=[1, 2, 3])
    assert denoised.shape == (3, adata2.n_vars)
    sample = model.posterior_predictive_sample(adata2)
    assert sample.shape == adata2.shape
    sample = model.posterior_predictive_sample(adata2, indices=[1, 2, 3], gene_list=["gene_1", "gene_2"])
    assert sample.shape == (3, 2)
    sample = model.posterior_predictive_sample(
        adata2, indices=[1, 2, 3], gene_list=["gene_1", "gene_2"], n_samples=3
    )
    assert sample.shape == (3, 2, 3)

    model.get_feature_correlation_matrix(correlation_type="pearson")
    model.get_feature_correlation_matrix(
        adata2, indices=[1, 2, 3], correlation_type="spearman", rna_size_factor=500, n_samples=5
    )
    params = model.get_likelihood_parameters()
    assert params["mean"].shape == adata.shape
    assert params["mean"].shape == params["dispersions"].shape == params["dropout"].shape
    params = model.get_likelihood_parameters(adata2, indices=[1, 2, 3])
    assert params["mean"].shape == (3, adata.n_vars)
    params = model.get_likelihood_parameters(adata2, indices=[1, 2, 3], n_samples=3, give_mean=True)
    assert params["mean"].shape == (3, adata.n_vars)
    model.get_latent_library_size()
    model.get_latent_library_size(adata2, indices=[1, 2, 3])

    # test transfer_anndata_setup
    adata2 = _synthetic()
    model._validate_anndata(adata2)
    model.get_elbo(adata2)

    # test automatic transfer_anndata_setup on a view
    adata = _synthetic()
    SCTrilemma.setup_anndata(adata, donor_key="batch")
    model = _model(adata)
    model.train(1, train_size=0.5)  # scVI's get_elbo works untrained; PB-Cond needs the codebook fitted in train
    adata2 = _synthetic()
    model.get_elbo(adata2[:10])

    # test automatic transfer_anndata_setup on a copy
    adata2 = adata.copy()
    model.get_elbo(adata2)
    assert adata.uns[_constants._SCVI_UUID_KEY] != adata2.uns[_constants._SCVI_UUID_KEY]
    # "mismatched categories raises" concerns labels, which SCTrilemma does not register.

    # test differential expression
    kwargs = {"n_samples_overall": 200}  # scVI's default is 5000; a smaller sample keeps the test fast
    model.differential_expression(groupby="labels", group1="label_1", **kwargs)
    model.differential_expression(groupby="labels", group1="label_1", group2="label_2", mode="change", **kwargs)
    model.differential_expression(groupby="labels", **kwargs)
    model.differential_expression(idx1=[0, 1, 2], idx2=[3, 4, 5], **kwargs)
    model.differential_expression(idx1=[0, 1, 2], **kwargs)


def test_scvi_sparse():
    adata = _synthetic()
    adata.X = sp.csr_matrix(adata.X)
    SCTrilemma.setup_anndata(adata)
    model = _model(adata)
    model.train(1, train_size=0.5)
    assert model.is_trained is True
    z = model.get_latent_representation()
    assert z.shape == (adata.shape[0], N_LATENT)
    model.get_elbo()
    model.get_marginal_ll(n_mc_samples=3)
    model.get_reconstruction_error()
    model.get_normalized_expression()
    model.differential_expression(groupby="labels", group1="label_1", n_samples_overall=200)


def test_scvi_error_on_es():
    adata = _synthetic()
    SCTrilemma.setup_anndata(adata)
    model = _model(adata)
    with pytest.raises(ValueError):
        model.train(1, train_size=1.0, early_stopping=True)


def test_setting_adata_attr():
    adata = _synthetic()
    SCTrilemma.setup_anndata(adata, donor_key="batch")
    model = _model(adata)
    model.train(1, train_size=0.5)

    adata2 = _synthetic()
    model.adata = adata2

    rep = model.get_latent_representation(adata)
    rep2 = model.get_latent_representation()
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(rep, rep2)

    orig_manager = model.get_anndata_manager(adata)
    assert model.registry_ is not orig_manager.registry
    assert model.summary_stats is not orig_manager.summary_stats

    adata3 = _synthetic()
    del adata3.obs["batch"]
    with pytest.raises(KeyError):
        model.adata = adata3


def test_backed_anndata_scvi(save_path):
    adata = _synthetic()
    path = os.path.join(save_path, "test_data.h5ad")
    adata.write_h5ad(path)
    adata = anndata.read_h5ad(path, backed="r+")
    SCTrilemma.setup_anndata(adata, donor_key="batch")
    model = _model(adata)
    model.train(1, train_size=0.5)
    assert model.is_trained is True
    z = model.get_latent_representation()
    assert z.shape == (adata.shape[0], N_LATENT)
    model.get_elbo()


@pytest.mark.slow  # up to 100 epochs
def test_early_stopping():
    n_epochs = 100
    adata = _synthetic()
    SCTrilemma.setup_anndata(adata, donor_key="batch")
    model = _model(adata)
    model.train(n_epochs, early_stopping=True, plan_kwargs={"lr": 0})
    assert len(model.history["elbo_train"]) < n_epochs


def test_scarches_data_prep(save_path):
    adata1 = _synthetic()
    SCTrilemma.setup_anndata(adata1, donor_key="batch")
    model = _model(adata1)
    model.train(1, check_val_every_n_epoch=1)
    dir_path = os.path.join(save_path, "saved_model/")
    model.save(dir_path, overwrite=True)

    # adata2 has more genes and a perfect subset of adata1
    adata2 = _synthetic(n_genes=110)
    adata2.obs["batch"] = adata2.obs.batch.cat.rename_categories(["batch_2", "batch_3"])
    SCTrilemma.prepare_query_anndata(adata2, dir_path)
    SCTrilemma.load_query_data(adata2, dir_path)

    adata3 = SCTrilemma.prepare_query_anndata(adata2, dir_path, inplace=False)
    SCTrilemma.load_query_data(adata3, dir_path)

    # adata4 has more genes and missing 10 genes from adata1
    adata4 = _synthetic(n_genes=110)
    new_var_names_init = [f"Random {i}" for i in range(10)]
    new_var_names = new_var_names_init + adata4.var_names[10:].to_list()
    adata4.var_names = new_var_names

    SCTrilemma.prepare_query_anndata(adata4, dir_path)
    # should be padded 0's
    assert np.sum(adata4[:, adata4.var_names[:10]].X) == 0
    np.testing.assert_equal(adata4.var_names[:10].to_numpy(), adata1.var_names[:10].to_numpy())
    SCTrilemma.load_query_data(adata4, dir_path)

    adata5 = SCTrilemma.prepare_query_anndata(adata4, dir_path, inplace=False)
    SCTrilemma.load_query_data(adata5, dir_path)


def test_scvi_online_update(save_path):
    adata1 = _synthetic()
    SCTrilemma.setup_anndata(adata1, donor_key="batch")
    model = _model(adata1)
    model.train(1, check_val_every_n_epoch=1)
    dir_path = os.path.join(save_path, "saved_model/")
    model.save(dir_path, overwrite=True)

    adata2 = _synthetic(n_genes=110)
    adata2.obs["batch"] = adata2.obs.batch.cat.rename_categories(["batch_2", "batch_3"])
    model2 = SCTrilemma.load_query_data(adata2, dir_path, inplace_subset_query_vars=True)
    model2.train(max_epochs=1, plan_kwargs={"weight_decay": 0.0})
    model2.get_latent_representation()
    # scVI compares the encoder's expression weights; here every reference weight stays equal
    for key, tensor in model2.module.state_dict().items():
        assert torch.equal(tensor, model.module.state_dict()[key]), key
    # dispersion
    assert model2.module.decoder.px_r.requires_grad is False
    # scVI's library encoder and batch-sized decoder input have no counterpart (observed library, no batch)

    model3 = SCTrilemma.load_query_data(adata2, dir_path, freeze_expression=False, freeze_batchnorm_encoder=True)
    model3.train(max_epochs=1)
    model3.get_latent_representation()
    assert model3.module.encoder.posterior_norm.momentum == 0
    assert model3.module.encoder.posterior_norm.weight.requires_grad is False
    assert model3.module.gene_embedding.weight.requires_grad is True

    model3 = SCTrilemma.load_query_data(adata2, dir_path, freeze_batchnorm_encoder=False)
    model3.train(max_epochs=1)
    model3.get_latent_representation()


def test_set_seed():
    seed = 1
    scvi.settings.seed = seed
    adata = _synthetic()
    SCTrilemma.setup_anndata(adata, donor_key="batch")
    model1 = _model(adata)
    model1.train(1)
    scvi.settings.seed = seed
    model2 = _model(adata)
    model2.train(1)
    assert torch.equal(model1.module.gene_embedding.weight, model2.module.gene_embedding.weight)


def test_scvi_with_external_indices():
    from sklearn.model_selection import train_test_split

    adata = _synthetic()
    SCTrilemma.setup_anndata(adata, donor_key="batch")
    model = _model(adata)
    train_ind, valid_ind = train_test_split(
        adata.obs.batch.index.astype(int), test_size=0.6, stratify=adata.obs.batch
    )
    model.train(
        1,
        check_val_every_n_epoch=1,
        datasplitter_kwargs={"external_indexing": [np.array(train_ind), np.array(valid_ind)]},
        train_size=0.5,
    )
    np.testing.assert_array_equal(np.sort(model.train_indices), np.sort(np.array(train_ind)))
    test_ind, valid_ind = train_test_split(
        valid_ind, test_size=0.5, stratify=adata.obs.loc[adata.obs.index[valid_ind], "batch"]
    )
    model.train(
        1,
        check_val_every_n_epoch=1,
        datasplitter_kwargs={"external_indexing": [np.array(train_ind), np.array(valid_ind), np.array(test_ind)]},
        train_size=0.5,
    )
    assert model.get_elbo().ndim == 0
    assert model.get_elbo(return_mean=False).shape == (adata.n_obs,)
    assert np.ndim(model.get_marginal_ll(n_mc_samples=3)) == 0
    assert model.get_marginal_ll(n_mc_samples=3, return_mean=False).shape == (adata.n_obs,)
    assert model.get_reconstruction_error()["reconstruction_loss"].ndim == 0
    assert model.get_normalized_expression(n_samples=2).shape == (adata.n_obs, adata.n_vars)
