"""The encoder reading the most variable genes only (``encoder_genes``), while the decoder reconstructs every gene."""

from __future__ import annotations

import warnings

import anndata as ad
import numpy as np
import pytest
import scanpy as sc
import scvi
import torch
from scvi import REGISTRY_KEYS

from sctrilemma import SCTrilemma
from sctrilemma._constants import SCT_MODULE_KEYS as KEYS
from sctrilemma.model._data_setup import most_variable_genes
from sctrilemma.module import SCTrilemmaModule


def test_most_variable_genes_are_scanpys_and_keep_the_thread_count(small_adata):
    torch.set_num_threads(1)
    mask = most_variable_genes(small_adata.X, 300)
    assert torch.get_num_threads() == 1
    expected = ad.AnnData(small_adata.X.astype(np.float32))
    sc.pp.normalize_total(expected, target_sum=1e4)
    sc.pp.log1p(expected)
    sc.pp.highly_variable_genes(expected, n_top_genes=300)
    np.testing.assert_array_equal(mask, expected.var["highly_variable"].to_numpy())
    assert mask.dtype == bool
    assert mask.sum() == 300
    # a subset of the cells, drawn with the seed
    np.testing.assert_array_equal(
        most_variable_genes(small_adata.X, 300, max_cells=200, seed=1),
        most_variable_genes(small_adata.X, 300, max_cells=200, seed=1),
    )


def test_the_encoder_crop_takes_only_the_masked_genes(tiny):
    module = SCTrilemmaModule(50, n_decoder_targets=16, encoder_genes=20, **tiny)
    assert module.encoder_gene_mask.all()  # every gene until fitted
    module.encoder_gene_mask[20:] = False
    x = torch.poisson(torch.full((8, 50), 3.0)) + 1.0  # every gene expressed
    module.eval()
    crop = module._regular_inference(x)[KEYS.CROP_KEY]
    assert crop.genes[crop.mask].max() < 20  # padded positions are masked
    assert crop.mask.sum(1).eq(20).all()  # every expressed gene of the twenty
    module.train()
    outputs = module._regular_inference(x)
    crop = outputs[KEYS.CROP_KEY]
    assert crop.genes[crop.mask].max() < 20
    # the decoder's targets still cover every gene
    target = module._get_generative_input({REGISTRY_KEYS.X_KEY: x}, outputs)["target"]
    assert target.genes.max() >= 20
    thinned = SCTrilemmaModule(50, n_decoder_targets=16, encoder_genes=20, min_depth_fraction=0.25, **tiny).train()
    thinned.encoder_gene_mask[20:] = False
    crop = thinned._regular_inference(x)[KEYS.CROP_KEY]
    assert crop.genes[crop.mask].max() < 20
    assert (crop.counts <= x.gather(1, crop.genes)).all()
    assert (crop.counts < x.gather(1, crop.genes)).any()  # thinned


def test_encoder_genes_needs_its_own_crop(tiny):
    with pytest.raises(ValueError, match="`encoder_genes=20` needs `n_decoder_targets` a number"):
        SCTrilemmaModule(50, encoder_genes=20, **tiny)
    with pytest.raises(ValueError, match="`encoder_genes` must be .all. or a positive integer"):
        SCTrilemmaModule(50, n_decoder_targets=16, encoder_genes=0, **tiny)


def test_training_fits_the_mask_and_load_keeps_it(small_adata, tiny, tmp_path):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", encoder_genes=500, **tiny)
    model.train(max_steps=2, batch_size=32, enable_progress_bar=False)
    mask = model.module.encoder_gene_mask.numpy()
    np.testing.assert_array_equal(mask, most_variable_genes(small_adata.X, 500))
    model.save(tmp_path / "model")
    loaded = SCTrilemma.load(tmp_path / "model", adata=small_adata)
    np.testing.assert_array_equal(loaded.module.encoder_gene_mask.numpy(), mask)
    np.testing.assert_allclose(loaded.get_latent_representation(), model.get_latent_representation(), atol=1e-6)
    # a zero-shot query reads the reference's genes, also when it fine-tunes
    query = SCTrilemma.load_query_data(small_adata.copy(), model, unfrozen=True)
    query.train(max_steps=1, batch_size=32, enable_progress_bar=False)
    np.testing.assert_array_equal(query.module.encoder_gene_mask.numpy(), mask)
    # a state saved before the mask existed loads with the encoder on every gene
    state = {k: v for k, v in model.module.state_dict().items() if k != "encoder_gene_mask"}
    model.module.load_state_dict(state)
    assert model.module.encoder_gene_mask.all()


def test_the_small_preset_leaves_data_with_few_genes_as_it_was(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    embeddings = []
    for encoder_genes in (4000, 10**6):  # the preset's, and more genes than any data set has
        scvi.settings.seed = 0
        model = SCTrilemma(small_adata, preset="small", encoder_genes=encoder_genes, **tiny)
        model.train(max_steps=2, batch_size=32, enable_progress_bar=False)
        assert model.module.encoder_gene_mask.all()
        embeddings.append(model.get_latent_representation())
    assert small_adata.n_vars <= SCTrilemma(small_adata, preset="small", **tiny).module.encoder_genes == 4000
    np.testing.assert_array_equal(embeddings[0], embeddings[1])
    assert SCTrilemma(small_adata, preset="paper", **tiny).module.encoder_genes == "all"


def test_a_query_missing_most_of_the_encoders_genes_is_warned(small_adata, tiny):
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", encoder_genes=300, **tiny)
    model.train(max_steps=2, batch_size=32, enable_progress_bar=False)
    reads = model.module.encoder_gene_mask.numpy().copy()
    # 100 of the 300 genes the encoder reads, and every other gene
    keep = np.sort(np.concatenate([np.flatnonzero(~reads), np.flatnonzero(reads)[:100]]))
    with pytest.warns(UserWarning, match=r"measures 100 of the 300 genes the reference's encoder reads"):
        query = SCTrilemma.load_query_data(small_adata[:, keep].copy(), model)
    np.testing.assert_array_equal(query.module.encoder_gene_mask.numpy(), reads)  # warned, not changed
    # 200 of them: no warning
    keep = np.sort(np.concatenate([np.flatnonzero(~reads), np.flatnonzero(reads)[:200]]))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*genes the reference's encoder reads")
        SCTrilemma.load_query_data(small_adata[:, keep].copy(), model)


@pytest.mark.parametrize("hidden_in_training", [False, True])
def test_a_query_missing_most_genes_of_an_encoder_reading_every_gene(small_adata, tiny, hidden_in_training):
    """An encoder reading every gene is warned about too, unless it was trained with genes hidden from it."""
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    fraction = 0.1 if hidden_in_training else 1.0
    model = SCTrilemma(small_adata, preset="small", encoder_genes="all", gene_panel_min_fraction=fraction, **tiny)
    model.train(max_steps=2, batch_size=32, enable_progress_bar=False)
    assert model.module.encoder_gene_mask.all()
    query = small_adata[:, : small_adata.n_vars // 3].copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SCTrilemma.load_query_data(query, model, min_overlap=0.3)  # a third of the model's genes
    messages = [str(w.message) for w in caught if "genes the reference's encoder reads" in str(w.message)]
    if hidden_in_training:
        assert messages == []
    else:
        n_reads = small_adata.n_vars
        assert len(messages) == 1
        assert f"measures {n_reads // 3} of the {n_reads} genes" in messages[0]
        assert "every gene of its training data" in messages[0]


def test_a_reference_for_other_panels_keeps_its_options(small_adata, tiny, tmp_path):
    """The user guide's recipe for references queried with other gene panels: every gene read, a share hidden."""
    SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, preset="small", encoder_genes="all", gene_panel_min_fraction=0.1, **tiny)
    assert model.module.encoder_genes == "all"  # not the preset's 4,000
    assert SCTrilemma(small_adata, preset="small", **tiny).module.gene_panel_min_fraction == 1.0  # off by default
    model.train(max_steps=2, batch_size=32, enable_progress_bar=False)
    assert model.module.encoder_gene_mask.all()
    model.save(tmp_path / "model")
    loaded = SCTrilemma.load(tmp_path / "model", adata=small_adata)
    assert loaded.module.gene_panel_min_fraction == 0.1
    assert loaded.module.encoder_genes == "all"
    assert loaded.module.encoder_gene_mask.all()
    # the option changes training only: the saved model embeds as the trained one
    np.testing.assert_allclose(loaded.get_latent_representation(), model.get_latent_representation(), atol=1e-6)
