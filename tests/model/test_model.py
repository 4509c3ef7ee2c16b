from __future__ import annotations

import copy
import inspect

import mudata as md
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch

from sctrilemma import SCTrilemma
from sctrilemma.io._reference import read_reference
from sctrilemma.model import PRESETS
from sctrilemma.module import SCTrilemmaModule


def _trained(adata, tiny, **kwargs) -> SCTrilemma:
    SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = SCTrilemma(adata, **tiny, **kwargs, preset="paper")
    model.train(max_epochs=1, batch_size=128, enable_progress_bar=False)
    return model


def test_workflow_shapes_and_outputs(small_adata, tiny):
    model = _trained(small_adata, tiny)
    assert model.is_trained
    latent = model.get_latent_representation()
    assert latent.shape == (small_adata.n_obs, tiny["n_hidden"])
    assert np.isfinite(latent).all()
    mean, var = model.get_latent_representation(return_dist=True)
    np.testing.assert_allclose(mean, latent, rtol=1e-5, atol=1e-6)
    assert (var > 0).all()
    # scVI's default: every gene, proportions (library_size=1)
    proportions = model.get_normalized_expression(indices=np.arange(20))
    assert isinstance(proportions, pd.DataFrame)
    assert proportions.shape == (20, small_adata.n_vars)
    assert list(proportions.index) == list(small_adata.obs_names[:20])
    assert list(proportions.columns) == list(small_adata.var_names)
    np.testing.assert_allclose(proportions.to_numpy().sum(1), 1.0, rtol=1e-4)
    # "observed" library: expected counts over all genes sum to each cell's raw total
    expression = model.get_normalized_expression(indices=np.arange(20), library_size="observed")
    counts = small_adata[:20].X.toarray().sum(1)
    np.testing.assert_allclose(expression.to_numpy().sum(1), counts, rtol=1e-4)
    np.testing.assert_allclose(expression.to_numpy(), proportions.to_numpy() * counts[:, None], rtol=1e-4)
    cp10k = model.get_normalized_expression(indices=np.arange(5), library_size=1e4, return_numpy=True)
    np.testing.assert_allclose(cp10k, 1e4 * proportions.to_numpy()[:5], rtol=1e-4)
    assert np.isfinite(model.get_elbo())
    assert "reconstruction_loss" in model.get_reconstruction_error()
    assert "SCTrilemma" in repr(model)


def test_gene_ratios_do_not_depend_on_gene_list(small_adata, tiny):
    model = _trained(small_adata, tiny)
    genes = list(small_adata.var_names[[0, 5, 10]])
    picked = model.get_normalized_expression(indices=np.arange(10), gene_list=genes[::-1])
    default = model.get_normalized_expression(indices=np.arange(10))
    assert list(picked.columns) == genes[::-1]  # the order of gene_list
    np.testing.assert_allclose(picked.to_numpy(), default[genes[::-1]].to_numpy(), rtol=1e-5)
    # the same genes by symbol
    symbols = list(small_adata.var.loc[genes, "gene_symbol"])
    by_symbol = model.get_normalized_expression(indices=np.arange(10), gene_list=symbols)
    assert list(by_symbol.columns) == genes
    np.testing.assert_allclose(by_symbol.to_numpy(), default[genes].to_numpy(), rtol=1e-5)


def test_eval_embedding_is_deterministic(small_adata, tiny):
    model = _trained(small_adata, tiny)
    np.testing.assert_array_equal(model.get_latent_representation(), model.get_latent_representation())


@pytest.mark.slow  # 20 epochs
def test_loss_decreases_with_training(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, prior="normal", preset="paper")
    model.train(max_epochs=20, batch_size=64, enable_progress_bar=False, plan_kwargs={"lr": 2e-3})
    loss = model.history["train_loss"].to_numpy(dtype=float).ravel()
    assert np.isfinite(loss).all()
    assert loss[-3:].mean() < 0.9 * loss[:3].mean()


def test_save_load_round_trip(small_adata, tiny, tmp_path):
    model = _trained(small_adata, tiny)
    latent = model.get_latent_representation()
    model.save(tmp_path / "model")
    loaded = SCTrilemma.load(tmp_path / "model", adata=small_adata)
    np.testing.assert_allclose(loaded.get_latent_representation(), latent, atol=1e-5)
    assert loaded.pseudobulk_codebook_ is not None
    np.testing.assert_array_equal(loaded.pseudobulk_codebook_["centroids"], model.pseudobulk_codebook_["centroids"])
    without_data = SCTrilemma.load(tmp_path / "model")
    np.testing.assert_allclose(without_data.get_latent_representation(small_adata.copy()), latent, atol=1e-5)


@pytest.mark.parametrize(
    "option",
    [
        {"prior": "normal"},
        {"prior": "shuffled"},
        {"gene_encoding": "additive"},
        {"decoder_query": "additive"},
        {"decoder_query": "none"},
        {"pooling": "attention"},
    ],
)
def test_every_ablation_trains(small_adata, tiny, option):
    model = _trained(small_adata, tiny, **option)
    assert np.isfinite(model.history["train_loss"].to_numpy(dtype=float)).all()
    assert np.isfinite(model.get_latent_representation()).all()


def test_presets_and_overrides(small_adata):
    SCTrilemma.setup_anndata(small_adata)
    small = SCTrilemma(small_adata, preset="small")
    assert small.module.n_hidden == 64
    override = SCTrilemma(small_adata, preset="small", n_hidden=48, n_heads=4)
    assert override.module.n_hidden == 48
    paper = SCTrilemma(small_adata, prior="normal", preset="paper")
    assert (paper.module.n_hidden, paper.module.n_latent_tokens, paper.module.crop_size) == (512, 64, 4096)
    # the paper's recipe: the crop is the decoder's target, dropout 0.1, PyTorch's default posterior head
    assert paper.module.n_decoder_targets == "crop"
    assert paper.module.encoder.blocks[0].attention.dropout_rate == pytest.approx(0.1)
    assert float(paper.module.encoder.to_logvar.bias.abs().max()) < 1.0
    # the small preset's short-run recipe, each setting overridable
    assert (small.module.n_decoder_targets, small.module.crop_size) == (512, 256)
    assert small.module.decoder.blocks[0].ffn.proj_out.in_features == 64  # feed-forward width 1 x d
    assert {block.attention.n_heads for block in [*small.module.encoder.blocks, *small.module.decoder.blocks]} == {1}
    assert {block.attention.n_heads for block in [*paper.module.encoder.blocks, *paper.module.decoder.blocks]} == {8}
    assert small.module.encoder.blocks[0].attention.dropout_rate == 0.0
    assert torch.all(small.module.encoder.to_logvar.bias == -4.0)
    assert (small.module.min_depth_fraction, paper.module.min_depth_fraction) == (0.4, 1.0)  # thinning: small only
    tuned = SCTrilemma(small_adata, preset="small", n_decoder_targets=64, posterior_logvar_init=-2.0)
    assert tuned.module.n_decoder_targets == 64
    assert torch.all(tuned.module.encoder.to_logvar.bias == -2.0)
    with pytest.raises(ValueError, match="`preset` must be one of"):
        SCTrilemma(small_adata, preset="huge")


def test_none_takes_the_presets_value_and_off_is_spelled_out(small_adata, tiny):
    """``None`` means the preset's value for every setting; the paper's 'none of these' values are words."""
    SCTrilemma.setup_anndata(small_adata)
    given = {"encoder_genes": None, "n_decoder_targets": None, "embedding_depth_quantile": None, "crop_size": None}
    small = SCTrilemma(small_adata, preset="small", **given)
    for key in given:
        assert getattr(small.module, key) == PRESETS["small"]["model"][key], key
    off = SCTrilemma(small_adata, preset="small", encoder_genes="all", embedding_depth_quantile="observed", **tiny)
    assert (off.module.encoder_genes, off.module.embedding_depth_quantile) == ("all", "observed")
    for wrong, message in [({"encoder_genes": "none"}, "`encoder_genes` must be 'all' or a positive integer"),
                           ({"n_decoder_targets": 2}, "`n_decoder_targets` must be 'crop' or an integer >= 4"),
                           ({"embedding_depth_quantile": 1.5}, "`embedding_depth_quantile` must be 'observed'")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            SCTrilemma(small_adata, preset="small", **tiny, **wrong)
    with pytest.raises(ValueError, match="needs `n_decoder_targets` a number"):
        SCTrilemma(small_adata, preset="paper", encoder_genes=100, **tiny)


def test_a_model_saved_with_none_for_the_papers_settings_loads_as_it_was(small_adata, tiny, tmp_path):
    """Models saved when ``None`` spelled 'the crop', 'every gene' and 'observed depth' load with those values."""
    SCTrilemma.setup_anndata(small_adata)
    model = SCTrilemma(small_adata, preset="paper", **tiny)
    model.save(tmp_path / "model")
    reference = read_reference(tmp_path / "model")
    metadata = copy.deepcopy(reference.metadata)
    config = metadata["config"]
    config["non_kwargs"]["n_decoder_targets"] = None
    config["kwargs"]["module_kwargs"].update(encoder_genes=None, embedding_depth_quantile=None)
    loaded = SCTrilemma._from_parts(reference.module_state, metadata)
    module = loaded.module
    assert (module.n_decoder_targets, module.encoder_genes, module.embedding_depth_quantile) == (
        "crop",
        "all",
        "observed",
    )
    for name, value in model.module.state_dict().items():
        assert torch.equal(module.state_dict()[name], value), name


def test_saved_model_keeps_its_resolved_sizes(small_adata, tmp_path, monkeypatch):
    """A saved model records its sizes, so it loads unchanged after a preset's defaults change."""
    SCTrilemma.setup_anndata(small_adata)
    model = SCTrilemma(small_adata, preset="small", posterior_logvar_init=-2.0)
    model.save(tmp_path / "model")
    monkeypatch.setitem(
        PRESETS["small"], "model", {**PRESETS["small"]["model"], "ffn_multiplier": 2.0, "n_decoder_targets": 64}
    )
    loaded = SCTrilemma.load(tmp_path / "model", adata=small_adata)
    assert loaded.module.n_decoder_targets == 512
    assert torch.all(loaded.module.encoder.to_logvar.bias == -2.0)
    for name, value in model.module.state_dict().items():
        assert torch.equal(loaded.module.state_dict()[name], value), name
    with pytest.raises(ValueError, match="`prior` must be"):
        SCTrilemma(small_adata, prior="uniform", preset="paper")


def test_cells_with_few_genes_are_not_trained_on(small_adata, tiny):
    dense = small_adata.X.toarray()
    dense[:7] = 0
    dense[:7, :3] = 1  # 3 expressed genes < 5
    small_adata.X = sp.csr_matrix(dense)
    model = _trained(small_adata, tiny)
    train_idx = set(model.train_indices.tolist())
    assert not train_idx & set(range(7))
    assert set(range(7)) <= set(model.test_indices.tolist())


def test_user_anndata_untouched_beyond_registry(small_adata, tiny):
    before_obs = set(small_adata.obs.columns)
    x_before = small_adata.X.copy()
    model = _trained(small_adata, tiny)
    model.get_latent_representation()
    model.get_normalized_expression(indices=np.arange(4))
    assert {c for c in set(small_adata.obs.columns) - before_obs if not c.startswith("_scvi_")} == set()
    assert (small_adata.X != x_before).nnz == 0


def test_mudata_rna_modality(small_adata, tiny):
    protein = small_adata[:, :10].copy()
    protein.var_names = [f"prot{i}" for i in range(10)]
    mdata = md.MuData({"rna": small_adata, "atac": protein})
    mdata.obs["donor"] = small_adata.obs["donor"].to_numpy()
    SCTrilemma.setup_mudata(mdata, donor_key="donor", modalities={"rna_layer": "rna"})
    model = SCTrilemma(mdata, **tiny, preset="paper")
    model.train(max_epochs=1, batch_size=128, enable_progress_bar=False)
    assert model.get_latent_representation().shape == (small_adata.n_obs, tiny["n_hidden"])
    assert model.module.n_input == small_adata.n_vars
    with pytest.raises(ValueError, match="RNA modality 'gex' not found"):
        SCTrilemma.setup_mudata(mdata, modalities={"rna_layer": "gex"})


# ---------------------------------------------------------------- bad input
def test_log_normalised_data_is_refused(small_adata):
    small_adata.X = sp.csr_matrix(np.log1p(small_adata.X.toarray().astype(np.float32)))
    with pytest.raises(ValueError, match=r"non-integer values.*layer='counts'"):
        SCTrilemma.setup_anndata(small_adata)


def test_negative_values_are_refused(small_adata):
    dense = small_adata.X.toarray().astype(np.float32)
    dense[0, 0] = -1
    small_adata.X = dense
    with pytest.raises(ValueError, match="negative values"):
        SCTrilemma.setup_anndata(small_adata)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf_are_refused(small_adata, bad):
    dense = small_adata.X.toarray().astype(np.float32)
    dense[1, 2] = bad
    small_adata.X = dense
    with pytest.raises(ValueError, match="NaN or infinite"):
        SCTrilemma.setup_anndata(small_adata)


def test_missing_obs_key_and_layer(small_adata):
    with pytest.raises(ValueError, match="`donor_key='individual'` is not a column of adata.obs"):
        SCTrilemma.setup_anndata(small_adata, donor_key="individual")
    with pytest.raises(ValueError, match="`layer='counts'` is not in the layers"):
        SCTrilemma.setup_anndata(small_adata, layer="counts")


def test_no_genes_is_refused(small_adata):
    with pytest.raises(ValueError, match="has no genes"):
        SCTrilemma.setup_anndata(small_adata[:, []].copy())


def test_donor_key_with_missing_values(small_adata):
    small_adata.obs["donor"] = small_adata.obs["donor"].astype(object)
    small_adata.obs.iloc[3, small_adata.obs.columns.get_loc("donor")] = np.nan
    with pytest.raises(ValueError, match="has 1 missing values"):
        SCTrilemma.setup_anndata(small_adata, donor_key="donor")


def test_empty_cells_are_refused_at_embedding(small_adata, tiny):
    model = _trained(small_adata, tiny)
    query = small_adata.copy()
    dense = query.X.toarray()
    dense[0] = 0
    query.X = sp.csr_matrix(dense)
    with pytest.raises(ValueError, match="have no counts"):
        model.get_latent_representation(query)


def test_gene_mismatch_is_refused(small_adata, tiny):
    model = _trained(small_adata, tiny)
    reordered = small_adata[:, small_adata.var_names[::-1]].copy()
    with pytest.raises(ValueError, match="genes differ from the model's"):
        model.get_latent_representation(reordered)


def test_unknown_gene_in_gene_list(small_adata, tiny):
    model = _trained(small_adata, tiny)
    with pytest.raises(ValueError, match="not among the model's genes.*NOT_A_GENE.*gene symbols"):
        model.get_normalized_expression(gene_list=["NOT_A_GENE"])
    with pytest.raises(ValueError, match="`library_size` must be a number, 'observed' or 'latent', got 'total'"):
        model.get_normalized_expression(library_size="total")


def test_new_donors_can_be_embedded(small_adata, example_adata, tiny):
    model = _trained(small_adata, tiny)
    query = example_adata[~example_adata.obs_names.isin(small_adata.obs_names)][:50].copy()
    query.obs["donor"] = "unseen-" + query.obs["donor"].astype(str)
    latent = model.get_latent_representation(query)
    assert latent.shape == (50, tiny["n_hidden"])


def test_backed_anndata(small_adata, tiny, tmp_path):
    import anndata as ad

    path = tmp_path / "backed.h5ad"
    small_adata.write_h5ad(path)
    backed = ad.read_h5ad(path, backed="r")
    SCTrilemma.setup_anndata(backed, donor_key="donor")
    model = SCTrilemma(backed, **tiny, preset="paper")
    model.train(max_epochs=1, batch_size=128, enable_progress_bar=False)
    latent = model.get_latent_representation()
    assert latent.shape == (small_adata.n_obs, tiny["n_hidden"])
    assert model.get_pseudobulk_codes().shape[0] == small_adata.obs["donor"].nunique()
    assert model.get_normalized_expression(indices=np.arange(5)).shape == (5, small_adata.n_vars)


def test_the_paper_preset_is_the_modules_defaults():
    """``preset="paper"`` builds the module of the paper: its defaults, whose parameter count tests/module checks."""
    defaults = inspect.signature(SCTrilemmaModule).parameters
    for key, value in PRESETS["paper"]["model"].items():
        assert defaults[key].default == value, key
