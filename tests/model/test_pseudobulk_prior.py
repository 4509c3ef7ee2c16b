from __future__ import annotations

import logging

import numpy as np
import pytest

from sctrilemma import SCTrilemma
from sctrilemma.data import PseudobulkCodebook, pseudobulk_profiles


def _trained(adata, tiny, **kwargs) -> SCTrilemma:
    SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = SCTrilemma(adata, **tiny, **kwargs, preset="paper")
    model.train(max_epochs=2, batch_size=128, enable_progress_bar=False)
    return model


def test_codes_are_computed_from_the_frozen_codebook(small_adata, tiny):
    model = _trained(small_adata, tiny)
    codes = model.get_pseudobulk_codes()
    donors = sorted(small_adata.obs["donor"].unique())
    assert list(codes.index.get_level_values("donor")) == donors
    code_columns = [c for c in codes.columns if c.startswith("code_")]
    np.testing.assert_allclose(codes[code_columns].sum(1), 1.0, rtol=1e-6)
    assert (codes["cluster"] == codes[code_columns].to_numpy().argmax(1)).all()
    # hand computation: profiles of each donor against the saved centroids and scale
    order = small_adata.obs["donor"].astype(str).map({d: i for i, d in enumerate(donors)}).to_numpy()
    profiles = pseudobulk_profiles(small_adata.X, order)
    expected = PseudobulkCodebook.from_dict(model.pseudobulk_codebook_).codes(profiles)
    np.testing.assert_allclose(codes[code_columns].to_numpy(), expected, rtol=1e-6)


def test_new_donors_are_assigned_without_refitting(small_adata, example_adata, tiny):
    model = _trained(small_adata, tiny)
    centroids = model.pseudobulk_codebook_["centroids"].copy()
    query = example_adata[~example_adata.obs_names.isin(small_adata.obs_names)][:300].copy()
    query.obs["donor"] = "new-" + query.obs["donor"].astype(str)
    codes = model.get_pseudobulk_codes(query)
    assert all(d.startswith("new-") for d in codes.index.get_level_values("donor"))
    np.testing.assert_array_equal(model.pseudobulk_codebook_["centroids"], centroids)


def test_prior_margin_and_shuffled_control(small_adata, tiny):
    model = _trained(small_adata, tiny)
    margin = model.get_prior_margin()
    assert np.isfinite(margin)
    shuffled = _trained(small_adata.copy(), tiny, prior="shuffled")
    matched = shuffled.get_pseudobulk_codes()
    unshuffled = PseudobulkCodebook.from_dict(shuffled.pseudobulk_codebook_)
    # the shuffled control uses a permutation of the groups' true codes
    true_codes = unshuffled.codes(shuffled._group_profiles(shuffled.adata_manager)[0])
    code_columns = [c for c in matched.columns if c.startswith("code_")]
    assert not np.allclose(matched[code_columns].to_numpy(), true_codes)
    np.testing.assert_allclose(np.sort(matched[code_columns].to_numpy(), 0), np.sort(true_codes, 0))


def test_one_group_per_cell_is_refused(small_adata, tiny):
    small_adata.obs["barcode"] = small_adata.obs_names.astype(str)
    SCTrilemma.setup_anndata(small_adata, donor_key="barcode")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    with pytest.raises(ValueError, match="Every cell forms its own dataset-donor group"):
        model.train(max_epochs=1, enable_progress_bar=False)


def test_normal_prior_has_no_codes(small_adata, tiny):
    model = _trained(small_adata, tiny, prior="normal")
    assert model.pseudobulk_codebook_ is None
    with pytest.raises(ValueError, match="standard-normal prior"):
        model.get_pseudobulk_codes()


def test_no_donor_key_gives_one_group_per_dataset(small_adata, tiny, caplog):
    SCTrilemma.setup_anndata(small_adata)
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    with caplog.at_level(logging.INFO, logger="sctrilemma"):
        model.train(max_epochs=1, enable_progress_bar=False)
    assert "Only 1 dataset-donor groups" in caplog.text
    codes = model.get_pseudobulk_codes()
    assert codes.shape[0] == 1
    assert codes["code_0"].iloc[0] == pytest.approx(1.0)
