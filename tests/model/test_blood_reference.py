"""The blood reference shipped with the package: three studies, its card, and zero-shot use on unseen donors."""

from __future__ import annotations

import json

import anndata as ad
import numpy as np
import pytest

from sctrilemma import SCTrilemma
from sctrilemma.data import blood_reference_dir, load_example
from sctrilemma.data._example import HELD_OUT_DONORS
from sctrilemma.io import read_reference
from sctrilemma.model import LabelClassifier


@pytest.fixture(scope="module")
def reference_cells() -> ad.AnnData:
    return ad.read_h5ad(blood_reference_dir() / "reference_cells.h5ad")


@pytest.fixture(scope="module")
def query_model() -> SCTrilemma:
    """The example's held-out donors, known by gene symbols only, embedded by the blood reference."""
    adata = load_example()
    query = adata[adata.obs["donor"].isin(HELD_OUT_DONORS)].copy()
    query.var_names = query.var["gene_symbol"].astype(str).to_numpy()
    query.var_names_make_unique()
    query.var = query.var.drop(columns="gene_symbol")
    return SCTrilemma.load_query_data(query, blood_reference_dir())


def test_the_blood_reference_covers_three_studies_and_says_so() -> None:
    metadata = read_reference(blood_reference_dir()).metadata
    assert metadata["registry"]["setup_args"]["dataset_key"] == "study"
    studies = metadata["registry"]["field_registries"]["dataset"]["state_registry"]["categorical_mapping"]
    assert set(studies) == {"Kang2018", "COMBAT2022", "10xPBMC"}
    figures = json.loads((blood_reference_dir() / "metrics.json").read_text())
    assert sum(figures["cells"].values()) > 10_000
    card = (blood_reference_dir() / "README.md").read_text()
    assert "COMBAT 2022" in card
    assert "license: cc-by-4.0" in card


def test_unseen_donors_get_the_reference_cell_types(query_model: SCTrilemma, reference_cells: ad.AnnData) -> None:
    """The reference carries its classifier: the query is labelled without the reference's cells."""
    assert query_model.adata.uns["sctrilemma_gene_match"]["by"] == "symbol"
    assert not reference_cells.obs["donor"].isin([f"Kang2018:{d}" for d in HELD_OUT_DONORS]).any()
    assert query_model.label_classifier_ is not None
    assert set(query_model.label_classifier_.classes) == set(reference_cells.obs["cell_type"].dropna())
    result = query_model.predict_labels()
    truth = query_model.adata.obs["cell_type"].astype(str).to_numpy()
    accuracy = (result["prediction"].astype(str).to_numpy() == truth).mean()
    print(f"accuracy {accuracy:.3f}, unknown {result['is_unknown'].mean():.3f}")
    assert accuracy > 0.95
    assert result["is_unknown"].mean() < 0.05


def test_a_type_the_reference_lacks_is_unknown(query_model: SCTrilemma, reference_cells: ad.AnnData) -> None:
    without_b = reference_cells[
        reference_cells.obs["cell_type"].notna() & (reference_cells.obs["cell_type"] != "B cells")
    ]
    classifier = LabelClassifier.fit(without_b.obsm["X_sctrilemma"], without_b.obs["cell_type"].astype(str))
    result = classifier.predict(query_model.get_latent_representation())
    b_cells = query_model.adata.obs["cell_type"].astype(str).to_numpy() == "B cells"
    unknown = result["is_unknown"].to_numpy()
    print(f"unknown: B {unknown[b_cells].mean():.3f}, others {unknown[~b_cells].mean():.3f}")
    assert unknown[b_cells].mean() > 0.5
    assert unknown[~b_cells].mean() < 0.05


def test_the_reference_cells_embedding_is_the_models(reference_cells: ad.AnnData) -> None:
    """The shipped embeddings are the model's own: a Kang reference cell of the example embeds to its stored row.

    Up to one shift: the embedding is centred on the mean prior mean of the cells' dataset, and these few cells of
    Kang's donors have other pseudo-bulks than all of their cells in training.
    """
    adata = load_example()
    kang = reference_cells.obs_names[reference_cells.obs["study"] == "Kang2018"].intersection(adata.obs_names)
    assert kang.size > 100
    model = SCTrilemma.load_query_data(adata[kang].copy(), blood_reference_dir())
    difference = model.get_latent_representation() - reference_cells[kang].obsm["X_sctrilemma"]
    np.testing.assert_allclose(difference, np.broadcast_to(difference[0], difference.shape), atol=1e-4)
