"""Checks at setup: duplicated gene names and cells without counts are refused, cells with few genes reported."""

from __future__ import annotations

import re
import warnings

import mudata as md
import numpy as np
import pandas as pd
import pytest
import scanpy as sc
import scipy.sparse as sp
import torch

from sctrilemma import SCTrilemma
from sctrilemma.data import example_reference_dir
from sctrilemma.model._model import MIN_EXPRESSED_GENES


def _duplicate_genes(adata, n: int = 3) -> None:
    names = adata.var_names.to_numpy().copy()
    names[1 : 1 + n] = names[0]
    adata.var_names = names


def test_duplicated_gene_names_are_refused(small_adata):
    _duplicate_genes(small_adata)
    first = small_adata.var_names[0]
    with pytest.raises(ValueError, match=rf"1 duplicated gene names \('{first}'\).*adata.var_names_make_unique\(\)"):
        SCTrilemma.setup_anndata(small_adata)


def test_duplicated_gene_names_suggest_the_id_column(small_adata):
    small_adata.var["gene_ids"] = [f"ENSG{i:011d}" for i in range(small_adata.n_vars)]
    _duplicate_genes(small_adata)
    with pytest.raises(ValueError, match=r"adata.var_names = adata.var\['gene_ids'\].astype\(str\)"):
        SCTrilemma.setup_anndata(small_adata)


def test_duplicated_gene_names_are_refused_in_mudata(small_adata):
    _duplicate_genes(small_adata)
    mdata = md.MuData({"rna": small_adata})
    with pytest.raises(ValueError, match=r"mdata.mod\['rna'\].var_names has 1 duplicated gene names"):
        SCTrilemma.setup_mudata(mdata)


def _few_genes(adata, n_few: int, n_empty: int) -> None:
    dense = adata.X.toarray()
    dense[: n_few + n_empty] = 0
    dense[:n_few, : MIN_EXPRESSED_GENES - 1] = 1
    adata.X = sp.csr_matrix(dense)


def test_cells_with_few_expressed_genes_are_reported_at_setup(small_adata):
    _few_genes(small_adata, n_few=4, n_empty=0)
    with pytest.warns(UserWarning, match=r"4 of 400 cells in adata.X have fewer than 5 expressed genes") as record:
        SCTrilemma.setup_anndata(small_adata)
    message = str(record[0].message)
    assert "`train` leaves them out" in message
    assert "sc.pp.filter_cells(adata, min_genes=5)" in message
    assert record[0].filename == __file__  # points at the user's call


def test_few_expressed_genes_in_mudata_and_layers(small_adata):
    small_adata.layers["counts"] = small_adata.X.copy()
    _few_genes(small_adata, n_few=3, n_empty=0)
    small_adata.X, small_adata.layers["counts"] = small_adata.layers["counts"], small_adata.X
    with pytest.warns(UserWarning, match=r"3 of 400 cells in adata.layers\['counts'\] have fewer than 5"):
        SCTrilemma.setup_anndata(small_adata, layer="counts")
    with pytest.warns(UserWarning, match=r"3 of 400 cells in mdata.mod\['rna'\].layers\['counts'\]"):
        SCTrilemma.setup_mudata(md.MuData({"rna": small_adata}), rna_layer="counts")


def test_clean_data_sets_up_silently(small_adata):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SCTrilemma.setup_anndata(small_adata, donor_key="donor")


def test_low_gene_cells_are_trained_without_but_embedded(small_adata, tiny):
    _few_genes(small_adata, n_few=3, n_empty=0)
    with pytest.warns(UserWarning, match="3 of 400 cells"):
        SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny, preset="paper")
    model.train(max_steps=1, batch_size=128, enable_progress_bar=False)
    assert not set(model.train_indices.tolist()) & set(range(3))
    latent = model.get_latent_representation()
    assert latent.shape == (400, tiny["n_hidden"])
    assert np.isfinite(latent).all()


# ------------------------------------------------------------------ cells without counts: refused before training
def _suggested_code(message: str) -> list[str]:
    """The code snippets (in backticks) of an error message."""
    return re.findall(r"`([^`]+)`", message)


def _setup_state(adata) -> tuple[pd.DataFrame, list[str]]:
    return adata.obs.copy(deep=True), sorted(adata.uns)


def test_cells_without_counts_are_refused_at_setup(small_adata):
    _few_genes(small_adata, n_few=4, n_empty=2)
    obs, uns = _setup_state(small_adata)
    first = small_adata.obs_names[4]
    with pytest.raises(ValueError, match=rf"2 of 400 cells in adata.X have no counts \('{first}', '.*'\)") as error:
        SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    # nothing was registered: no scvi-tools columns in obs, no registry in uns
    pd.testing.assert_frame_equal(small_adata.obs, obs)
    assert sorted(small_adata.uns) == uns
    fix = _suggested_code(str(error.value))
    assert fix == ["sc.pp.filter_cells(adata, min_counts=1)"]
    namespace = {"adata": small_adata, "sc": sc, "np": np}
    exec(fix[0], namespace)
    assert namespace["adata"].n_obs == 398
    with pytest.warns(UserWarning, match="4 of 398 cells"):  # cells with few genes are only reported
        SCTrilemma.setup_anndata(namespace["adata"], donor_key="donor")


def test_cells_without_counts_in_a_layer_or_mudata_are_refused(small_adata):
    small_adata.layers["counts"] = small_adata.X.copy()
    _few_genes(small_adata, n_few=0, n_empty=3)
    small_adata.X, small_adata.layers["counts"] = small_adata.layers["counts"], small_adata.X
    with pytest.raises(ValueError, match=r"3 of 400 cells in adata.layers\['counts'\] have no counts") as error:
        SCTrilemma.setup_anndata(small_adata, layer="counts")
    namespace = {"adata": small_adata.copy(), "np": np}
    exec(_suggested_code(str(error.value))[0], namespace)
    assert namespace["adata"].n_obs == 397
    SCTrilemma.setup_anndata(namespace["adata"], layer="counts")

    mdata = md.MuData({"rna": small_adata})
    obs, uns = _setup_state(mdata)
    with pytest.raises(ValueError, match=r"3 of 400 cells in mdata.mod\['rna'\].layers\['counts'\] have no") as error:
        SCTrilemma.setup_mudata(mdata, rna_layer="counts")
    pd.testing.assert_frame_equal(mdata.obs, obs)
    assert sorted(mdata.uns) == uns
    namespace = {"mdata": mdata, "np": np}
    exec(_suggested_code(str(error.value))[0], namespace)
    assert namespace["mdata"].n_obs == 397
    SCTrilemma.setup_mudata(namespace["mdata"], rna_layer="counts")


def test_training_refuses_attached_data_without_counts(small_adata):
    """Data attached to a loaded model skips setup's checks; `train` refuses empty cells before training."""
    model = SCTrilemma.load(example_reference_dir())
    _few_genes(small_adata, n_few=0, n_empty=1)
    model.adata = small_adata  # as `SCTrilemma.load(path, adata)`: set up from the saved registry
    weights = {key: tensor.clone() for key, tensor in model.module.state_dict().items()}
    history = {key: frame.copy() for key, frame in model.history.items()}
    with pytest.raises(ValueError, match=r"1 of 400 cells in the model's data have no counts.*model.adata = adata"):
        model.train(max_steps=1, batch_size=128, enable_progress_bar=False)
    for key, tensor in model.module.state_dict().items():
        assert torch.equal(tensor, weights[key]), key
    assert sorted(model.history) == sorted(history)
    for key, frame in history.items():
        pd.testing.assert_frame_equal(model.history[key], frame)


# ------------------------------------------------------------------ missing donor values: the suggested fixes work
@pytest.mark.parametrize(
    ("dtype", "fill"),
    [
        ("category", ".cat.add_categories('unknown').fillna('unknown')"),
        ("category with unknown", ".fillna('unknown')"),
        ("str", ".fillna('unknown')"),
        ("float", ".astype('string').fillna('unknown')"),
        ("int object", ".astype('string').fillna('unknown')"),
        ("int category", ".astype('string').fillna('unknown')"),
    ],
)
def test_missing_donor_values_suggest_fixes_that_work(small_adata, dtype, fill):
    """The suggested code, run as it is, gives a column that sets up (``astype(str)`` would make a donor "nan")."""
    donors = small_adata.obs["donor"].astype(str).to_numpy().astype(object)
    if dtype in ("float", "int object", "int category"):
        donors = np.asarray([int(d) for d in donors], dtype=float if dtype == "float" else object)
    missing = np.arange(small_adata.n_obs) % 50 == 3  # 8 cells
    donors[missing] = np.nan if dtype == "float" else None
    column = pd.Series(donors, index=small_adata.obs_names)
    if "category" in dtype:
        column = column.astype("category")
    if dtype == "category with unknown":
        column = column.cat.add_categories("unknown")
    small_adata.obs["donor"] = column
    obs, uns = _setup_state(small_adata)
    with pytest.raises(ValueError, match=r"adata.obs\['donor'\] \(`donor_key`\) has 8 missing values") as error:
        SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    pd.testing.assert_frame_equal(small_adata.obs, obs)
    assert sorted(small_adata.uns) == uns
    message = str(error.value)
    assert "astype(str)" not in message  # it would turn NaN into a donor called "nan"
    suggested = [code for code in _suggested_code(message) if " = " in code]
    assert suggested == [
        "adata = adata[adata.obs['donor'].notna()].copy()",
        f"adata.obs['donor'] = adata.obs['donor']{fill}",
    ]
    for code, n_obs, n_unknown in zip(suggested, (392, 400), (0, 8), strict=True):
        namespace = {"adata": small_adata.copy()}
        exec(code, namespace)
        fixed = namespace["adata"]
        assert fixed.n_obs == n_obs
        SCTrilemma.setup_anndata(fixed, donor_key="donor")
        registered = fixed.obs["donor"].astype(str)
        assert "nan" not in set(registered)
        assert (registered == "unknown").sum() == n_unknown
        assert registered.nunique() == 5 + (n_unknown > 0)
