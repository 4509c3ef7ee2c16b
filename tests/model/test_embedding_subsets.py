"""A cell's embedding depends on that cell alone: a subset, `indices=`, a reloaded model and a zero-shot query agree."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anndata as ad
import numpy as np
import pytest
import scvi

from sctrilemma import SCTrilemma

if TYPE_CHECKING:
    from pathlib import Path

# The bar: at most 1e-4 of the embedding's mean absolute value.
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def trained(_example: ad.AnnData, tiny_sizes: dict) -> tuple[SCTrilemma, ad.AnnData]:
    """The small preset (it reports each cell relative to its dataset's centre), two datasets, 60 steps."""
    rng = np.random.default_rng(0)
    keep = np.sort(rng.choice(_example.n_obs, 600, replace=False))
    adata = _example[keep].copy()
    adata.obs["study"] = np.where(adata.obs["donor"].isin(["1015", "1016"]), "A", "B")
    scvi.settings.seed = 0
    SCTrilemma.setup_anndata(adata, donor_key="donor", dataset_key="study")
    model = SCTrilemma(adata, preset="small", **tiny_sizes)
    model.train(max_steps=60, enable_progress_bar=False)
    return model, adata


def _assert_same_rows(part: np.ndarray, full: np.ndarray) -> None:
    scale = np.abs(full).mean()
    assert np.abs(part - full).max() <= TOLERANCE * scale, np.abs(part - full).max() / scale


def test_subsets_embed_as_within_all_cells(trained: tuple[SCTrilemma, ad.AnnData], tmp_path: Path) -> None:
    model, adata = trained
    assert model.module.embedding_centred_on_prior
    assert set(model.embedding_centres_) == {"A", "B"}
    full = model.get_latent_representation()
    donor = adata.obs["donor"].to_numpy() == "1244"
    _assert_same_rows(model.get_latent_representation(adata[donor].copy()), full[donor])  # one donor alone
    rows = np.sort(np.random.default_rng(1).choice(adata.n_obs, 37, replace=False))
    _assert_same_rows(model.get_latent_representation(indices=rows), full[rows])  # indices=
    _assert_same_rows(model.get_latent_representation(adata[rows].copy()), full[rows])  # a random subset
    _assert_same_rows(model.get_latent_representation(adata[rows[:1]].copy()), full[rows[:1]])  # one cell

    model.save(tmp_path / "model")
    loaded = SCTrilemma.load(tmp_path / "model", adata=adata)
    assert loaded.embedding_centres_ == model.embedding_centres_
    _assert_same_rows(loaded.get_latent_representation(adata[donor].copy()), full[donor])


def test_a_query_is_fixed_when_it_is_mapped(trained: tuple[SCTrilemma, ad.AnnData], _example: ad.AnnData) -> None:
    model, adata = trained
    query = _example[~_example.obs_names.isin(adata.obs_names)][:300].copy()
    query_model = SCTrilemma.load_query_data(query, model)
    assert "unknown" in query_model.embedding_centres_  # the query's own dataset, fixed at mapping
    assert {k: query_model.embedding_centres_[k] for k in ("A", "B")} == model.embedding_centres_
    full = query_model.get_latent_representation()
    half = np.arange(0, query.n_obs, 2)
    _assert_same_rows(query_model.get_latent_representation(indices=half), full[half])
    alone = query_model.get_latent_representation(query_model.adata[half[:5]].copy())
    _assert_same_rows(alone, full[half[:5]])
