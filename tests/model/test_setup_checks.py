"""Checks at setup: duplicated gene names are refused, cells with too few expressed genes are reported."""

from __future__ import annotations

import warnings

import mudata as md
import numpy as np
import pytest
import scipy.sparse as sp

from sctrilemma import SCTrilemma
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
    _few_genes(small_adata, n_few=4, n_empty=2)
    with pytest.warns(UserWarning, match=r"6 of 400 cells in adata.X have fewer than 5 expressed genes") as record:
        SCTrilemma.setup_anndata(small_adata)
    message = str(record[0].message)
    assert "`train` leaves them out; 2 have no counts at all and cannot be embedded" in message
    assert "sc.pp.filter_cells(adata, min_genes=5)" in message
    assert record[0].filename == __file__  # points at the user's call


def test_few_expressed_genes_in_mudata_and_layers(small_adata):
    small_adata.layers["counts"] = small_adata.X.copy()
    _few_genes(small_adata, n_few=3, n_empty=0)
    small_adata.X, small_adata.layers["counts"] = small_adata.layers["counts"], small_adata.X
    with pytest.warns(UserWarning, match=r"3 of 400 cells in adata.layers\['counts'\] have fewer than 5") as record:
        SCTrilemma.setup_anndata(small_adata, layer="counts")
    assert "cannot be embedded" not in str(record[0].message)
    with pytest.warns(UserWarning, match=r"3 of 400 cells in mdata.mod\['rna'\].layers\['counts'\]"):
        SCTrilemma.setup_mudata(md.MuData({"rna": small_adata}), rna_layer="counts")


def test_clean_data_sets_up_silently(small_adata):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SCTrilemma.setup_anndata(small_adata, donor_key="donor")


def test_low_gene_cells_trained_without_and_embedded_unless_empty(small_adata, tiny):
    _few_genes(small_adata, n_few=3, n_empty=1)
    with pytest.warns(UserWarning, match="4 of 400 cells"):
        SCTrilemma.setup_anndata(small_adata, donor_key="donor")
    model = SCTrilemma(small_adata, **tiny)
    model.train(max_steps=1, batch_size=128, enable_progress_bar=False)
    assert not set(model.train_indices.tolist()) & set(range(4))
    assert model.get_latent_representation(indices=np.arange(3)).shape == (3, tiny["n_hidden"])
    with pytest.raises(ValueError, match="1 cells in the requested data have no counts"):
        model.get_latent_representation()
