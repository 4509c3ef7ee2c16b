"""Several studies in one AnnData over the union of their genes."""

from __future__ import annotations

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from sctrilemma.data import concat_studies


def _study(counts: list[list[int]], var_names: list[str], symbols: list[str] | None = None, cells: str = "c"):
    var = pd.DataFrame(index=var_names)
    if symbols is not None:
        var["gene_symbol"] = symbols
    obs = pd.DataFrame(index=[f"{cells}{i}" for i in range(len(counts))])
    return ad.AnnData(sp.csr_matrix(np.asarray(counts, dtype=np.float32)), obs=obs, var=var)


def test_genes_are_matched_by_symbol_and_keep_ensembl_ids_where_known() -> None:
    with_ids = _study([[1, 0, 2], [0, 3, 0]], ["ENSG00000000001.5", "ENSG00000000002", "ENSG00000000003"],
                      ["CD3E", "MS4A1", "NEVER"])  # fmt: skip
    with_ids.X[:, 2] = 0  # NEVER is expressed in no cell of any study
    with_ids.X.eliminate_zeros()
    by_symbol = _study([[5, 1, 1], [0, 0, 4]], ["cd3e", "LYZ", "LYZ"])  # lower case, and a symbol given twice
    both = concat_studies({"first": with_ids, "second": by_symbol}, study_key="study")
    assert both.var["gene_symbol"].tolist() == ["CD3E", "LYZ", "MS4A1"]
    assert both.var_names.tolist() == ["ENSG00000000001", "LYZ", "ENSG00000000002"]
    np.testing.assert_array_equal(both.X.toarray(), [[1, 0, 0], [0, 0, 3], [5, 2, 0], [0, 4, 0]])
    assert both.obs["study"].tolist() == ["first", "first", "second", "second"]
    assert both.obs_names.is_unique  # the two studies used the same cell names
    assert with_ids.n_vars == 3  # the inputs are left alone


def test_a_study_named_by_ensembl_ids_without_symbols_is_refused() -> None:
    ids_only = _study([[1, 2]], ["ENSG00000000001", "ENSG00000000002"])
    with pytest.raises(ValueError, match="no symbol column"):
        concat_studies({"a": ids_only, "b": _study([[1]], ["CD3E"])})
    with pytest.raises(ValueError, match="empty"):
        concat_studies({})
