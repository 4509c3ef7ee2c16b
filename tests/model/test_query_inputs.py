"""Query inputs with the shipped reference: backed AnnData, cells without counts, missing donor values."""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scanpy as sc
import scipy.sparse as sp

import sctrilemma._validation
from sctrilemma import SCTrilemma
from sctrilemma.data import example_reference_dir, load_example
from sctrilemma.data._example import HELD_OUT_DONORS

if TYPE_CHECKING:
    from pathlib import Path

N_CELLS = 300
CHUNK = 64  # rows per read in these tests, so that a 300-cell query is read in several chunks


@pytest.fixture(scope="module")
def _query() -> ad.AnnData:
    """300 cells of the two donors the shipped reference never saw, genes by symbol in a shuffled order."""
    example = load_example()
    cells = np.flatnonzero(example.obs["donor"].astype(str).isin(HELD_OUT_DONORS))
    rng = np.random.default_rng(0)
    subset = example[np.sort(rng.choice(cells, N_CELLS, replace=False)), rng.permutation(example.n_vars)]
    return ad.AnnData(X=sp.csr_matrix(subset.X), obs=subset.obs.copy(), var=subset.var.copy())


@pytest.fixture
def query(_query: ad.AnnData) -> ad.AnnData:
    return _query.copy()


@pytest.fixture(scope="module")
def reference() -> SCTrilemma:
    return SCTrilemma.load(example_reference_dir())


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _snapshot(adata: ad.AnnData) -> tuple:
    return adata.obs.copy(deep=True), adata.var.copy(deep=True), adata.X.copy(), sorted(adata.uns)


def _assert_unchanged(adata: ad.AnnData, snapshot: tuple) -> None:
    obs, var, counts, uns = snapshot
    pd.testing.assert_frame_equal(adata.obs, obs)
    pd.testing.assert_frame_equal(adata.var, var)
    assert (adata.X != counts).nnz == 0
    assert sorted(adata.uns) == uns


# ------------------------------------------------------------------ backed input
def test_backed_query_embeds_as_in_memory(
    query: ad.AnnData, reference: SCTrilemma, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "query.h5ad"
    query.write_h5ad(path)
    digest = _digest(path)
    in_memory = SCTrilemma.load_query_data(query, reference).get_latent_representation()

    # every read of the backed counts is a chunk of at most CHUNK rows, never the whole matrix
    monkeypatch.setattr(sctrilemma._validation, "ROW_CHUNK", CHUNK)
    backed = ad.read_h5ad(path, backed="r")
    rows_read = []
    read = type(backed.X).__getitem__

    def recording_read(self, index):
        block = read(self, index)
        rows_read.append(block.shape[0])
        return block

    monkeypatch.setattr(type(backed.X), "__getitem__", recording_read)
    model = SCTrilemma.load_query_data(backed, example_reference_dir())
    latent = model.get_latent_representation()
    assert rows_read
    assert max(rows_read) <= CHUNK
    assert sum(rows_read) >= 2 * N_CELLS  # counts checked and totals taken in one pass, mapped in another
    np.testing.assert_allclose(latent, in_memory, atol=1e-5)
    assert model.adata.uns["sctrilemma_gene_match"]["n_matched"] == query.n_vars

    # the backed AnnData and its file are unchanged
    assert backed.isbacked
    assert backed.shape == query.shape
    assert backed.var_names.tolist() == query.var_names.tolist()
    prepared = SCTrilemma.prepare_query_anndata(backed, reference, inplace=False)
    assert backed.isbacked
    np.testing.assert_allclose(
        SCTrilemma.load_query_data(prepared, reference).get_latent_representation(), in_memory, atol=1e-5
    )
    # in place, a backed query becomes an in-memory AnnData (scVI's inplace default); the file is not written
    assert SCTrilemma.prepare_query_anndata(backed, reference) is None
    assert not backed.isbacked
    assert backed.var_names.tolist() == reference.gene_names_.tolist()
    assert _digest(path) == digest


# ------------------------------------------------------------------ cells without counts: refused before any work
def test_query_cells_without_counts_are_refused(query: ad.AnnData, reference: SCTrilemma) -> None:
    counts = query.X.tolil()
    counts[[5, 9], :] = 0
    query.X = counts.tocsr()
    before = _snapshot(query)
    names = query.obs_names
    message = rf"2 of {N_CELLS} cells in adata.X have no counts \('{names[5]}', '{names[9]}'\)"
    with pytest.raises(ValueError, match=message):
        SCTrilemma.prepare_query_anndata(query, reference)
    with pytest.raises(ValueError, match=message) as error:
        SCTrilemma.load_query_data(query, reference, inplace_subset_query_vars=True)
    _assert_unchanged(query, before)  # refused before anything was written, in place or not

    fix = re.findall(r"`([^`]+)`", str(error.value))
    assert fix == ["sc.pp.filter_cells(adata, min_counts=1)"]
    namespace = {"adata": query, "sc": sc}
    exec(fix[0], namespace)
    assert SCTrilemma.load_query_data(namespace["adata"], reference).adata.n_obs == N_CELLS - 2


def test_query_cells_empty_in_the_reference_genes(query: ad.AnnData, reference: SCTrilemma) -> None:
    """Cells whose counts are all in genes the reference lacks: a warning when preparing, refused when loading."""
    unknown = ad.AnnData(
        X=sp.csr_matrix(np.ones((query.n_obs, 3), dtype=np.float32)),
        obs=query.obs[[]],
        var=pd.DataFrame(index=[f"ENSG9{n:010d}" for n in range(3)]),
    )
    query = ad.concat([query, unknown], axis=1, merge="first")
    counts = query.X.tolil()
    counts[7, : query.n_vars - 3] = 0
    query.X = counts.tocsr()
    before = _snapshot(query)
    with pytest.warns(UserWarning, match=r"1 of 300 query cells have counts only in genes the reference does not"):
        prepared = SCTrilemma.prepare_query_anndata(query, reference, inplace=False)
    with pytest.raises(ValueError, match=r"1 of 300 query cells .*sc.pp.filter_cells\(prepared, min_counts=1\)"):
        SCTrilemma.load_query_data(query, reference, inplace_subset_query_vars=True)
    _assert_unchanged(query, before)

    # the fix the message gives works
    sc.pp.filter_cells(prepared, min_counts=1)
    latent = SCTrilemma.load_query_data(prepared, reference).get_latent_representation()
    assert latent.shape == (N_CELLS - 1, reference.module.n_hidden)
    assert np.isfinite(latent).all()


# ------------------------------------------------------------------ missing donor values in a query
def test_query_donor_column_with_missing_values(query: ad.AnnData, reference: SCTrilemma) -> None:
    """The reference's donor column, used implicitly, is checked too: ``astype(str)`` would make a donor "nan"."""
    query.obs["donor"] = query.obs["donor"].astype(str).astype(object)
    query.obs.iloc[:4, query.obs.columns.get_loc("donor")] = None
    with pytest.raises(ValueError, match=r"adata.obs\['donor'\] \(`donor_key`\) has 4 missing values") as error:
        SCTrilemma.load_query_data(query, reference)
    fill = [code for code in re.findall(r"`([^`]+)`", str(error.value)) if " = " in code][1]
    namespace = {"adata": query}
    exec(fill, namespace)
    model = SCTrilemma.load_query_data(namespace["adata"], reference)
    assert (model.adata.obs["donor"] == "unknown").sum() == 4
    assert "nan" not in set(model.adata.obs["donor"])
