"""Zero-shot queries: gene matching into the reference's vocabulary, unseen donors, imputation, failures."""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import scvi
import torch

from sctrilemma import SCTrilemma
from sctrilemma.data import load_example
from sctrilemma.data._example import REFERENCE_DONORS

if TYPE_CHECKING:
    from pathlib import Path

QUERY_DONORS = ("1256", "1488")
ENSEMBL = re.compile(r"^ENS[A-Z]*G\d{6,}")


# ------------------------------------------------------------------ module-scoped data and models
@pytest.fixture(scope="module")
def example() -> ad.AnnData:
    return load_example()


def _cells(example: ad.AnnData, donors: tuple[str, ...], n_per_donor: int, seed: int) -> ad.AnnData:
    rng = np.random.default_rng(seed)
    donor = example.obs["donor"].astype(str).to_numpy()
    keep = np.sort(np.concatenate([rng.choice(np.flatnonzero(donor == d), n_per_donor, replace=False) for d in donors]))
    subset = example[keep]
    return ad.AnnData(X=subset.X.copy(), obs=subset.obs.copy(), var=subset.var.copy())


@pytest.fixture(scope="module")
def reference(example: ad.AnnData, tiny_sizes: dict) -> SCTrilemma:
    adata = _cells(example, REFERENCE_DONORS, 134, seed=0)
    scvi.settings.seed = 0
    SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = SCTrilemma(adata, **tiny_sizes, preset="paper")
    model.train(max_epochs=1, batch_size=128, enable_progress_bar=False)
    return model


@pytest.fixture(scope="module")
def reference_dir(reference: SCTrilemma, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("query") / "reference"
    reference.save(directory)
    return directory


@pytest.fixture(scope="module")
def _base(example: ad.AnnData) -> ad.AnnData:
    return _cells(example, QUERY_DONORS, 100, seed=1)


@pytest.fixture
def base(_base: ad.AnnData) -> ad.AnnData:
    """200 cells of held-out donors, all genes in the reference's order (a fresh copy per test)."""
    return _base.copy()


@pytest.fixture(scope="module")
def measured(_base: ad.AnnData) -> np.ndarray:
    """Sorted vocabulary positions of the 70% of genes the query measures."""
    rng = np.random.default_rng(2)
    return np.sort(rng.choice(_base.n_vars, int(round(0.7 * _base.n_vars)), replace=False))


def _modified(base: ad.AnnData, measured: np.ndarray, seed: int = 3) -> ad.AnnData:
    """The measured genes shuffled, with ``.5`` version suffixes, plus 50 genes not in the vocabulary."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(measured)
    subset = base[:, order]
    fake_ids = np.asarray([f"ENSG9{n:010d}" for n in rng.choice(10**9, 50, replace=False)], dtype=object)
    assert not np.isin(fake_ids, base.var_names).any()
    fake_counts = sp.csr_matrix(rng.poisson(0.5, size=(base.n_obs, 50)).astype(subset.X.dtype))
    symbols = np.concatenate([subset.var["gene_symbol"].astype(str).to_numpy(), [f"FAKE{i}" for i in range(50)]])
    var = pd.DataFrame(
        {"gene_symbol": symbols},
        index=pd.Index([f"{g}.5" for g in np.concatenate([subset.var_names.to_numpy(), fake_ids])]),
    )
    return ad.AnnData(X=sp.hstack([subset.X, fake_counts], format="csr"), obs=base.obs.copy(), var=var)


def _original_order(base: ad.AnnData, measured: np.ndarray) -> ad.AnnData:
    subset = base[:, measured]
    return ad.AnnData(X=subset.X.copy(), obs=base.obs.copy(), var=subset.var.copy())


def _snapshot(adata: ad.AnnData) -> dict[str, Any]:
    return {
        "obs": adata.obs.copy(deep=True),
        "var": adata.var.copy(deep=True),
        "var_names": adata.var_names.tolist(),
        "obs_names": adata.obs_names.tolist(),
        "X": adata.X.copy(),
        "uns": sorted(adata.uns),
        "layers": sorted(adata.layers),
    }


def _assert_unchanged(adata: ad.AnnData, snapshot: dict[str, Any]) -> None:
    pd.testing.assert_frame_equal(adata.obs, snapshot["obs"])
    pd.testing.assert_frame_equal(adata.var, snapshot["var"])
    assert adata.var_names.tolist() == snapshot["var_names"]
    assert adata.obs_names.tolist() == snapshot["obs_names"]
    assert (adata.X != snapshot["X"]).nnz == 0
    assert adata.X.dtype == snapshot["X"].dtype
    assert sorted(adata.uns) == snapshot["uns"]
    assert sorted(adata.layers) == snapshot["layers"]


# ------------------------------------------------------------------ preparing a query
def test_prepare_query_anndata(
    reference: SCTrilemma, reference_dir: Path, base: ad.AnnData, measured: np.ndarray
) -> None:
    query = _modified(base, measured)
    before = _snapshot(query)
    prepared = SCTrilemma.prepare_query_anndata(query, reference_dir, inplace=False)
    _assert_unchanged(query, before)

    vocabulary = reference.gene_names_
    assert prepared.shape == (base.n_obs, vocabulary.size)
    assert prepared.var_names.tolist() == vocabulary.tolist()
    assert prepared.var["gene_symbol"].tolist() == reference.gene_symbols_.tolist()
    expected_measured = np.zeros(vocabulary.size, dtype=bool)
    expected_measured[measured] = True
    np.testing.assert_array_equal(prepared.var["measured"].to_numpy(), expected_measured)

    counts = prepared.X.toarray()
    original = base.X.toarray()
    np.testing.assert_array_equal(counts[:, measured], original[:, measured])
    assert not counts[:, ~expected_measured].any()
    assert counts.sum() == original[:, measured].sum()

    assert prepared.obs_names.tolist() == base.obs_names.tolist()
    for column in ("cell_type", "condition", "batch"):
        assert prepared.obs[column].tolist() == base.obs[column].tolist()
    assert prepared.obs["donor"].tolist() == base.obs["donor"].astype(str).tolist()
    report = prepared.uns["sctrilemma_gene_match"]
    assert report["by"] == "ensembl"
    assert report["n_query_genes"] == measured.size + 50
    assert report["n_matched"] == measured.size

    # a model instance as reference gives the same result as its saved directory
    from_model = SCTrilemma.prepare_query_anndata(query, reference, inplace=False)
    assert (from_model.X != prepared.X).nnz == 0
    pd.testing.assert_frame_equal(from_model.var, prepared.var)

    # scVI's defaults: the reference's genes on request, and in place otherwise
    names = SCTrilemma.prepare_query_anndata(query, reference, return_reference_var_names=True)
    assert isinstance(names, pd.Index)
    assert names.tolist() == vocabulary.tolist()
    _assert_unchanged(query, before)
    assert SCTrilemma.prepare_query_anndata(query, reference_dir) is None
    assert query.var_names.tolist() == vocabulary.tolist()
    assert (query.X != prepared.X).nnz == 0
    pd.testing.assert_frame_equal(query.var, prepared.var)


# ------------------------------------------------------------------ zero-shot mapping
@pytest.fixture(scope="module")
def query_model(reference_dir: Path, _base: ad.AnnData, measured: np.ndarray) -> SCTrilemma:
    return SCTrilemma.load_query_data(_modified(_base.copy(), measured), reference_dir)


@pytest.fixture(scope="module")
def query_latent(query_model: SCTrilemma) -> np.ndarray:
    return query_model.get_latent_representation()


def test_zero_shot_embedding(
    query_model: SCTrilemma, query_latent: np.ndarray, reference: SCTrilemma, base: ad.AnnData, measured: np.ndarray
) -> None:
    assert query_model.is_trained
    assert query_model.adata.n_obs == base.n_obs
    assert set(query_model.adata.obs["donor"]) == set(QUERY_DONORS)
    donors = query_model.adata_manager.get_state_registry("donor").categorical_mapping
    assert set(QUERY_DONORS) <= set(donors)
    assert query_latent.shape == (base.n_obs, reference.module.n_hidden)
    assert np.isfinite(query_latent).all()
    assert query_latent.std(0).min() > 0  # cells are not all mapped to one point

    # no training happened: weights and history are the reference's
    for key, tensor in reference.module.state_dict().items():
        assert torch.equal(query_model.module.state_dict()[key], tensor), key
    assert sorted(query_model.history) == sorted(reference.history)
    np.testing.assert_array_equal(
        query_model.history["train_loss"].to_numpy(dtype=float), reference.history["train_loss"].to_numpy(dtype=float)
    )

    # shuffled, suffixed and padded with unknown genes == the same measured genes in the original order
    plain = SCTrilemma.load_query_data(_original_order(base, measured), reference)
    np.testing.assert_allclose(plain.get_latent_representation(), query_latent, atol=1e-5)

    # with all genes, the zero-shot embedding is the reference model's own embedding of the data
    full = SCTrilemma.load_query_data(base.copy(), reference).get_latent_representation()
    np.testing.assert_allclose(full, reference.get_latent_representation(base.copy()), atol=1e-5)
    assert np.abs(full - query_latent).max() > 1e-4  # dropping 30% of genes does change the input


def test_symbol_only_query(
    reference_dir: Path, query_latent: np.ndarray, base: ad.AnnData, measured: np.ndarray
) -> None:
    subset = base[:, measured]
    symbols = subset.var["gene_symbol"].astype(str).to_numpy()
    query = ad.AnnData(X=subset.X.copy(), obs=base.obs.copy(), var=pd.DataFrame(index=pd.Index(symbols)))
    query.var_names_make_unique()
    assert query.var.shape[1] == 0
    assert not any(ENSEMBL.match(name) for name in query.var_names)
    assert not any(ENSEMBL.match(str(value)) for value in query.obs.to_numpy().ravel())

    model = SCTrilemma.load_query_data(query, reference_dir)
    assert model.adata.uns["sctrilemma_gene_match"]["by"] == "symbol"
    assert model.adata.uns["sctrilemma_gene_match"]["n_matched"] == measured.size
    np.testing.assert_allclose(model.get_latent_representation(), query_latent, atol=1e-5)

    # lower-case symbols are matched too
    query.var_names = [name.lower() for name in query.var_names]
    lower = SCTrilemma.load_query_data(query, reference_dir)
    np.testing.assert_allclose(lower.get_latent_representation(), query_latent, atol=1e-5)


def test_imputes_unmeasured_genes(query_model: SCTrilemma, measured: np.ndarray) -> None:
    vocabulary = query_model.gene_names_
    unmeasured = np.setdiff1d(np.arange(vocabulary.size), measured)
    assert not query_model.adata.var["measured"].to_numpy()[unmeasured].any()
    genes = list(vocabulary[unmeasured[:: max(1, unmeasured.size // 8)][:8]]) + list(vocabulary[measured[:3]])
    expression = query_model.get_normalized_expression(indices=np.arange(10), gene_list=genes, library_size="observed")
    assert list(expression.columns) == genes
    assert expression.shape == (10, len(genes))
    values = expression.to_numpy()
    assert np.isfinite(values).all()
    assert (values > 0).all()
    proportions = query_model.get_normalized_expression(indices=np.arange(10), gene_list=genes, library_size=1.0)
    assert ((proportions.to_numpy() > 0) & (proportions.to_numpy() < 1)).all()


# ------------------------------------------------------------------ failures
def test_too_little_overlap(reference_dir: Path, base: ad.AnnData) -> None:
    rng = np.random.default_rng(4)
    renamed = rng.choice(base.n_vars, int(round(0.8 * base.n_vars)), replace=False)  # only 20% of the model's genes
    names = base.var_names.to_numpy().astype(object)
    names[renamed] = [f"ENSG8{n:010d}" for n in range(renamed.size)]
    query = ad.AnnData(X=base.X.copy(), obs=base.obs.copy(), var=pd.DataFrame(index=pd.Index(names)))
    before = _snapshot(query)
    found = base.n_vars - renamed.size
    message = rf"holds only {found} of the model's {base.n_vars} genes .*`min_overlap`"
    with pytest.raises(ValueError, match=message):
        SCTrilemma.prepare_query_anndata(query, reference_dir)
    with pytest.raises(ValueError, match=message):
        SCTrilemma.load_query_data(query, reference_dir)
    _assert_unchanged(query, before)
    # the threshold is what fails: a lower one accepts the same query
    prepared = SCTrilemma.prepare_query_anndata(query, reference_dir, inplace=False, min_overlap=0.1)
    assert prepared.uns["sctrilemma_gene_match"]["n_model_genes_found"] == found
    assert prepared.uns["sctrilemma_gene_match"]["model_gene_fraction"] == pytest.approx(found / base.n_vars)


def test_full_transcriptome_query_is_accepted(reference_dir: Path, base: ad.AnnData) -> None:
    """The model's genes among 20,000 others, as in a full-transcriptome study: accepted, the same embedding."""
    n_other = 20_000
    rng = np.random.default_rng(5)
    other = sp.random(base.n_obs, n_other, density=0.02, format="csr", random_state=6, dtype=np.float32)
    other.data = rng.integers(1, 4, other.data.size).astype(np.float32)
    order = rng.permutation(base.n_vars + n_other)
    counts = sp.hstack([sp.csr_matrix(base.X), other], format="csr")[:, order]
    names = np.concatenate([base.var_names.to_numpy(), [f"ENSG7{n:010d}.1" for n in range(n_other)]])[order]
    query = ad.AnnData(X=counts, obs=base.obs.copy(), var=pd.DataFrame(index=pd.Index(names.astype(str))))
    model = SCTrilemma.load_query_data(query, reference_dir)  # the default threshold
    assert model.adata.uns["sctrilemma_gene_match"]["model_gene_fraction"] == 1.0
    alone = SCTrilemma.load_query_data(base, reference_dir).get_latent_representation()  # the model's genes only
    np.testing.assert_allclose(model.get_latent_representation(), alone, atol=1e-5)


def test_duplicated_query_genes_are_refused(reference_dir: Path, base: ad.AnnData) -> None:
    names = base.var_names.to_numpy().astype(object)
    names[1] = names[0]
    query = ad.AnnData(X=base.X.copy(), obs=base.obs.copy(), var=pd.DataFrame(index=pd.Index(names)))
    before = _snapshot(query)
    with pytest.raises(ValueError, match=r"duplicated gene names .*var_names_make_unique"):
        SCTrilemma.load_query_data(query, reference_dir)
    _assert_unchanged(query, before)


def test_query_without_donor_column(
    reference_dir: Path, query_latent: np.ndarray, base: ad.AnnData, measured: np.ndarray, tiny_sizes: dict
) -> None:
    query = _modified(base, measured)
    del query.obs["donor"]
    before = _snapshot(query)
    model = SCTrilemma.load_query_data(query, reference_dir)
    assert (model.adata.obs["donor"] == "unknown").all()
    latent = model.get_latent_representation()
    assert latent.shape == (base.n_obs, tiny_sizes["n_hidden"])
    np.testing.assert_allclose(latent, query_latent, atol=1e-5)  # donors do not enter the encoder
    _assert_unchanged(query, before)
    assert "donor" not in query.obs.columns


def test_donor_key_renaming(reference_dir: Path, base: ad.AnnData, measured: np.ndarray) -> None:
    query = _modified(base, measured)
    query.obs["individual"] = query.obs.pop("donor").astype(str).radd("patient-")
    prepared = SCTrilemma.prepare_query_anndata(query, reference_dir, inplace=False, donor_key="individual")
    assert prepared.obs["donor"].tolist() == query.obs["individual"].tolist()
    assert set(prepared.obs["donor"]) == {f"patient-{d}" for d in QUERY_DONORS}
    model = SCTrilemma.load_query_data(query, reference_dir, donor_key="individual")
    assert set(model.adata.obs["donor"]) == {f"patient-{d}" for d in QUERY_DONORS}
    assert np.isfinite(model.get_latent_representation()).all()
    # a query column overrides a column named like the reference's
    query.obs["donor"] = "someone"
    prepared = SCTrilemma.prepare_query_anndata(query, reference_dir, inplace=False, donor_key="individual")
    assert set(prepared.obs["donor"]) == {f"patient-{d}" for d in QUERY_DONORS}
    with pytest.raises(ValueError, match="not a column"):
        SCTrilemma.prepare_query_anndata(query, reference_dir, donor_key="sample")


def _registry_equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(_registry_equal(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray | list | tuple | pd.Index):
        return np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    return a == b


def test_reference_model_is_not_modified(reference: SCTrilemma, base: ad.AnnData, measured: np.ndarray) -> None:
    adata, manager = reference.adata, reference.adata_manager
    adata_before = _snapshot(adata)
    registry = copy.deepcopy(dict(reference.registry_))
    weights = {k: v.clone() for k, v in reference.module.state_dict().items()}
    codebook = copy.deepcopy(reference.pseudobulk_codebook_)
    latent = reference.get_latent_representation()

    model = SCTrilemma.load_query_data(_modified(base, measured), reference)
    assert model is not reference
    assert model.module is not reference.module
    model.get_latent_representation()
    model.get_normalized_expression(indices=np.arange(5), gene_list=list(reference.gene_names_[:5]))

    assert reference.adata is adata
    assert reference.adata_manager is manager
    _assert_unchanged(adata, adata_before)
    assert _registry_equal(dict(reference.registry_), registry)
    assert list(reference.registry_["field_registries"]["donor"]["state_registry"]["categorical_mapping"]) == list(
        REFERENCE_DONORS
    )
    for key, tensor in weights.items():
        assert torch.equal(reference.module.state_dict()[key], tensor), key
    np.testing.assert_array_equal(reference.pseudobulk_codebook_["centroids"], codebook["centroids"])
    assert reference.pseudobulk_codebook_["sigma"] == codebook["sigma"]
    np.testing.assert_array_equal(reference.get_latent_representation(), latent)


def test_non_count_query(reference_dir: Path, base: ad.AnnData) -> None:
    query = base.copy()
    query.X = query.X.astype(np.float32)
    query.X.data = np.log1p(query.X.data)
    with pytest.raises(ValueError, match="non-integer"):
        SCTrilemma.prepare_query_anndata(query, reference_dir)
    with pytest.raises(ValueError, match="non-integer"):
        SCTrilemma.load_query_data(query, reference_dir)


# ------------------------------------------------------------------ numeric donor IDs
@pytest.fixture(scope="module")
def numeric_donor_reference_dir(
    example: ad.AnnData, tmp_path_factory: pytest.TempPathFactory, tiny_sizes: dict
) -> Path:
    """A reference whose donor column holds integers (as read from many sample sheets)."""
    adata = _cells(example, REFERENCE_DONORS, 50, seed=5)
    adata.obs["donor"] = adata.obs["donor"].astype(str).astype(int)
    scvi.settings.seed = 0
    SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = SCTrilemma(adata, **tiny_sizes, preset="paper")
    model.train(max_epochs=1, batch_size=128, enable_progress_bar=False)
    assert model.registry_["field_registries"]["donor"]["state_registry"]["categorical_mapping"].dtype.kind == "i"
    directory = tmp_path_factory.mktemp("numeric") / "reference"
    model.save(directory)
    return directory


@pytest.mark.parametrize("with_donor_column", [True, False])
def test_reference_with_numeric_donors(
    numeric_donor_reference_dir: Path, example: ad.AnnData, with_donor_column: bool, tiny_sizes: dict
) -> None:
    query = _cells(example, ("1244", "1256", "1488"), 30, seed=6)  # one reference donor, two new ones
    query.obs["donor"] = query.obs["donor"].astype(str).astype(int)
    if not with_donor_column:
        del query.obs["donor"]
    model = SCTrilemma.load_query_data(query, numeric_donor_reference_dir)
    latent = model.get_latent_representation()
    assert latent.shape == (query.n_obs, tiny_sizes["n_hidden"])
    assert np.isfinite(latent).all()
    mapping = [str(c) for c in model.adata_manager.get_state_registry("donor").categorical_mapping]
    expected = ["1015", "1016", "1244", "1256", "1488"] if with_donor_column else ["1015", "1016", "1244", "unknown"]
    assert mapping == expected  # the shared donor 1244 is recognised, not added as a new category


# ------------------------------------------------------------------ scArches arguments and freezing
def test_query_training_keeps_reference_weights(
    reference: SCTrilemma, reference_dir: Path, base: ad.AnnData, measured: np.ndarray, caplog
) -> None:
    weights = {k: v.clone() for k, v in reference.module.state_dict().items()}
    query = _modified(base, measured)
    model = SCTrilemma.load_query_data(
        query, reference_dir, inplace_subset_query_vars=False, accelerator="cpu", device="auto", freeze_dropout=True
    )
    assert not any(p.requires_grad for p in model.module.parameters())
    latent = model.get_latent_representation()
    with caplog.at_level("WARNING", logger="sctrilemma"):
        model.train(max_steps=2, batch_size=64, enable_progress_bar=False)
    assert "Nothing to train" in caplog.text
    for key, tensor in model.module.state_dict().items():
        assert torch.equal(tensor, weights[key]), key
    np.testing.assert_array_equal(model.get_latent_representation(), latent)

    # freeze_expression=False trains only the gene embeddings and the E-Gate
    partly = SCTrilemma.load_query_data(query, reference, freeze_expression=False)
    partly.train(max_steps=2, batch_size=64, enable_progress_bar=False)
    changed = {
        k
        for k, v in partly.module.state_dict().items()
        if not torch.equal(v, weights[k]) and not k.endswith("num_batches_tracked")  # a step counter
    }
    assert changed
    assert all(k.startswith(("encoder.gene_embedding.", "encoder.expression_gate.")) for k in changed), changed

    # unfrozen=True fine-tunes everything
    free = SCTrilemma.load_query_data(query, reference, unfrozen=True)
    free.train(max_steps=2, batch_size=64, enable_progress_bar=False)
    assert not torch.equal(free.module.state_dict()["encoder.latent_queries"], weights["encoder.latent_queries"])


def test_inplace_subset_query_vars(reference: SCTrilemma, base: ad.AnnData, measured: np.ndarray) -> None:
    query = _modified(base, measured)
    model = SCTrilemma.load_query_data(query, reference, inplace_subset_query_vars=True)
    assert model.adata is query
    assert query.var_names.tolist() == reference.gene_names_.tolist()
    # gene symbols work in gene_list after a query, as Ensembl IDs do
    symbol = str(reference.gene_symbols_[0])
    by_symbol = model.get_normalized_expression(indices=np.arange(3), gene_list=[symbol])
    by_id = model.get_normalized_expression(indices=np.arange(3), gene_list=[reference.gene_names_[0]])
    np.testing.assert_allclose(by_symbol.to_numpy(), by_id.to_numpy())


@pytest.mark.parametrize("problem", ["mouse_ids", "mouse_symbols", "no_shared_genes", "duplicated_genes", "no_counts"])
def test_bad_queries_are_refused_before_any_work(reference_dir: Path, base: ad.AnnData, problem: str) -> None:
    """Each with a message naming the problem and the fix; the query and the reference's files are unchanged."""
    names = base.var_names.to_numpy().astype(object)
    counts = base.X.copy()
    if problem == "mouse_ids":
        names = np.asarray([f"ENSMUSG{n:011d}" for n in range(names.size)], dtype=object)
        expected = "another species"
    elif problem == "mouse_symbols":
        names = np.asarray([f"Gm{n}" if n % 3 else f"Cd{n}a" for n in range(names.size)], dtype=object)
        expected = "mouse symbols"
    elif problem == "no_shared_genes":
        names = np.asarray([f"ENSG5{n:010d}" for n in range(names.size)], dtype=object)
        expected = r"holds only 0 of the model's .*`min_overlap`"
    elif problem == "duplicated_genes":
        names[3] = names[2]
        expected = r"duplicated gene names .*var_names_make_unique"
    else:
        counts = sp.csr_matrix(counts.shape, dtype=counts.dtype)
        expected = "no counts"
    query = ad.AnnData(X=counts, obs=base.obs.copy(), var=pd.DataFrame(index=pd.Index(names)))
    before = _snapshot(query)
    files = {path.name: path.read_bytes() for path in reference_dir.iterdir()}
    with pytest.raises(ValueError, match=expected):
        SCTrilemma.load_query_data(query, reference_dir)
    _assert_unchanged(query, before)
    assert {path.name: path.read_bytes() for path in reference_dir.iterdir()} == files
