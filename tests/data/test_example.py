from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from sctrilemma.data import load_example

if TYPE_CHECKING:
    import anndata as ad


def test_example_contents(example_adata: ad.AnnData) -> None:
    adata = example_adata
    assert adata.shape == (3000, 2511)
    assert sp.issparse(adata.X)
    assert adata.X.format == "csr"
    data = adata.X.data
    assert (data >= 0).all()
    assert np.array_equal(data, np.round(data))
    assert data.max() > 1
    assert {"donor", "cell_type"} <= set(adata.obs.columns)
    assert adata.obs["donor"].nunique() == 5
    assert (adata.obs["donor"].value_counts() == 600).all()
    assert adata.obs["cell_type"].nunique() > 1
    assert "gene_symbol" in adata.var.columns
    assert adata.var_names.is_unique
    assert adata.var["gene_symbol"].notna().all()


def test_load_example_returns_a_new_object() -> None:
    a, b = load_example(), load_example()
    assert a is not b
    before = b.X.data.copy()
    a.X.data[:10] = 12345
    a.obs["donor"] = "changed"
    assert np.array_equal(b.X.data, before)
    assert b.obs["donor"].nunique() == 5
