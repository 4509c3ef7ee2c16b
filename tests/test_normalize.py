"""The shared log1p(CP10K) normalisation: scanpy's, on arrays, sparse matrices and tensors alike."""

from __future__ import annotations

import numpy as np
import scanpy as sc
import scipy.sparse as sp
import torch

from sctrilemma._normalize import log1p_cp10k, log1p_cp10k_tensor


def test_log1p_cp10k_matches_scanpy_on_every_input_type(small_adata) -> None:
    counts = small_adata.X[:50]
    expected = sc.pp.log1p(sc.pp.normalize_total(small_adata[:50].copy(), target_sum=1e4, copy=True), copy=True).X
    expected = expected.toarray()
    np.testing.assert_allclose(log1p_cp10k(counts).toarray(), expected, rtol=1e-5)
    np.testing.assert_allclose(log1p_cp10k(counts.toarray()), expected, rtol=1e-5)
    tensor = torch.as_tensor(counts.toarray(), dtype=torch.float32)
    np.testing.assert_allclose(log1p_cp10k_tensor(tensor).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_a_subset_of_genes_normalises_by_the_whole_cell_library(small_adata) -> None:
    counts = small_adata.X[:20].toarray().astype(np.float32)
    library = counts.sum(1)
    genes = np.arange(0, counts.shape[1], 7)
    expected = np.log1p(1e4 * counts[:, genes] / library[:, None])
    np.testing.assert_allclose(log1p_cp10k(counts[:, genes], library_size=library), expected, rtol=1e-5)
    subset = torch.as_tensor(counts[:, genes])
    whole = torch.as_tensor(library)[:, None]
    np.testing.assert_allclose(log1p_cp10k_tensor(subset, whole).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_an_empty_cell_stays_zero() -> None:
    zeros = np.zeros((2, 5))
    assert not log1p_cp10k(zeros).any()
    assert not log1p_cp10k(sp.csr_matrix(zeros)).toarray().any()
    assert not log1p_cp10k_tensor(torch.zeros(2, 5)).any()
