"""The local mini-Census, the SOMA data module and the streamed pseudo-bulk pass (no network)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("tiledbsoma")
pytest.importorskip("tiledbsoma_ml")
cellxgene_census = pytest.importorskip("cellxgene_census")

from sctrilemma.data import (  # noqa: E402
    CENSUS_OBS_FILTER,
    SomaDataModule,
    build_example_census,
    load_example,
    open_experiment,
    pseudobulk_profiles,
)
from sctrilemma.data._census import cached_pseudobulk  # noqa: E402


@pytest.fixture(scope="module")
def census_dir(tmp_path_factory: pytest.TempPathFactory):
    return build_example_census(tmp_path_factory.mktemp("census") / "mini_census")


@pytest.fixture(scope="module")
def datamodule(census_dir, tmp_path_factory: pytest.TempPathFactory) -> SomaDataModule:
    return SomaDataModule(str(census_dir), batch_size=64, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def filtered_example(census_dir) -> tuple:
    """The example AnnData restricted to the cells passing the paper's filter, in soma_joinid order."""
    with cellxgene_census.open_soma(uri=str(census_dir)) as census:
        obs = cellxgene_census.get_obs(
            census, "Homo sapiens", value_filter=CENSUS_OBS_FILTER, column_names=["soma_joinid", "obs_id"]
        )
    adata = load_example()
    return adata[obs["obs_id"].to_numpy()].copy(), obs["soma_joinid"].to_numpy()


def test_census_example_has_the_census_schema(census_dir):
    with cellxgene_census.open_soma(uri=str(census_dir)) as census:
        experiment = census["census_data"]["homo_sapiens"]
        assert "raw" in experiment.ms["RNA"].X
        obs = cellxgene_census.get_obs(census, "Homo sapiens")
        var = cellxgene_census.get_var(census, "Homo sapiens")
    for column in ("dataset_id", "donor_id", "cell_type", "assay", "suspension_type", "is_primary_data"):
        assert column in obs.columns
    assert {"feature_id", "feature_name"} <= set(var.columns)
    assert obs.shape[0] == 3000
    assert (~obs["is_primary_data"]).sum() == 40
    assert (obs["suspension_type"] == "na").sum() == 40
    assert obs.groupby("dataset_id")["donor_id"].nunique().to_dict() == {"kang2018-ctrl-a": 3, "kang2018-ctrl-b": 2}


def test_census_example_refuses_to_overwrite(census_dir):
    with pytest.raises(FileExistsError, match="overwrite=True"):
        build_example_census(census_dir)


def test_census_open_errors(census_dir, tmp_path):
    with pytest.raises(ValueError, match="Cannot open a TileDB-SOMA object"):
        open_experiment(tmp_path / "nothing")
    with pytest.raises(ValueError, match="Organism 'Mus musculus' not in this Census"):
        open_experiment(str(census_dir), "Mus musculus")
    assert open_experiment(str(census_dir / "census_data" / "homo_sapiens")).uri.endswith("homo_sapiens")
    with pytest.raises(ValueError, match="No cell of .* passes"):
        SomaDataModule(str(census_dir), obs_value_filter="donor_id == 'nobody'", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="Reading .* with the filters failed"):
        SomaDataModule(str(census_dir), obs_value_filter="no_such_column == 1", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="no X layer RNA/counts"):
        SomaDataModule(str(census_dir), layer_name="counts", cache_dir=tmp_path)


def test_census_datamodule_filter_vocabulary_and_registry(datamodule, census_dir, tmp_path):
    example = load_example()
    assert datamodule.n_obs == 2920  # 3,000 minus 40 non-primary and 40 'na' suspensions
    np.testing.assert_array_equal(datamodule.gene_ids, example.var_names.to_numpy())
    np.testing.assert_array_equal(datamodule.gene_symbols, example.var["gene_symbol"].astype(str).to_numpy())
    registry = datamodule.registry
    assert registry["setup_args"] == {"layer": None, "donor_key": "donor_id", "dataset_key": "dataset_id"}
    assert registry["field_registries"]["donor"]["summary_stats"] == {"n_donor": 5}
    own = SomaDataModule(
        str(census_dir), obs_value_filter="is_primary_data == True and donor_id == '1015'", cache_dir=tmp_path
    )
    with cellxgene_census.open_soma(uri=str(census_dir)) as census:
        obs = cellxgene_census.get_obs(census, "Homo sapiens", value_filter="donor_id == '1015'")
    assert own.n_obs == int(obs["is_primary_data"].sum())
    assert own.donor_categories.tolist() == ["1015"]


def test_census_inference_batches_are_the_in_memory_inputs(datamodule, filtered_example):
    adata, joinids = filtered_example
    rows, seen = [], []
    for tensors in datamodule.inference_dataloader(batch_size=500):
        rows.append(tensors["X"].numpy())
        seen.append(tensors["soma_joinid"].numpy())
        donors = datamodule.donor_categories[tensors["donor"].long().ravel().numpy()]
        order = pd.Index(joinids).get_indexer(tensors["soma_joinid"].numpy())
        np.testing.assert_array_equal(donors, adata.obs["donor"].astype(str).to_numpy()[order])
    np.testing.assert_array_equal(np.concatenate(seen), joinids)
    np.testing.assert_array_equal(np.vstack(rows), adata.X.toarray().astype(np.float32))


def test_census_training_batches_are_shuffled_and_complete(census_dir, tmp_path):
    # Its own data module: set_epoch changes the shuffle, which must not leak into the shared fixture.
    datamodule = SomaDataModule(str(census_dir), batch_size=64, cache_dir=tmp_path)
    datamodule.setup("fit")
    first = np.concatenate([t["soma_joinid"].numpy() for t in datamodule.train_dataloader()])
    datamodule.set_epoch(1)
    second = np.concatenate([t["soma_joinid"].numpy() for t in datamodule.train_dataloader()])
    assert first.size == second.size == datamodule.n_obs  # every cell of the example has >= 5 genes
    assert not np.array_equal(first, np.sort(first))
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(np.sort(first), np.sort(second))


def test_census_pseudobulk_matches_in_memory_and_is_cached(datamodule, filtered_example):
    adata, _ = filtered_example
    table = datamodule.pseudobulk(progress_bar=False)
    groups = pd.MultiIndex.from_arrays([table.datasets, table.donors])
    cells = pd.MultiIndex.from_arrays([adata.obs["donor"].astype(str).map(_dataset_of), adata.obs["donor"].astype(str)])
    expected = pseudobulk_profiles(adata.X, groups.get_indexer(cells), len(groups))
    np.testing.assert_allclose(table.profiles, expected, rtol=1e-10, atol=1e-10)
    assert table.n_cells.sum() == datamodule.n_obs
    cache_files = list(datamodule.cache_dir.glob("pseudobulk_*.npz"))
    assert len(cache_files) == 1

    def must_not_run():
        raise AssertionError("recomputed despite the cache")

    cached = cached_pseudobulk(cache_files[0], must_not_run)
    np.testing.assert_array_equal(cached.profiles, table.profiles)
    np.testing.assert_array_equal(cached.donors, table.donors)


def _dataset_of(donor: str) -> str:
    return "kang2018-ctrl-a" if donor in ("1015", "1016", "1244") else "kang2018-ctrl-b"


@pytest.mark.slow  # a fresh interpreter imports torch and scvi-tools
def test_census_import_sctrilemma_does_not_import_tiledbsoma():
    code = (
        "import sys, sctrilemma; sctrilemma.SCTrilemma, sctrilemma.data, sctrilemma.benchmark; "
        "print('tiledbsoma' in sys.modules, 'cellxgene_census' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "False False"


@pytest.mark.slow
def test_census_dataloader_workers_shard_the_stream(census_dir, tmp_path):
    datamodule = SomaDataModule(str(census_dir), batch_size=64, num_workers=2, cache_dir=tmp_path)
    datamodule.setup("fit")
    seen = np.concatenate([t["soma_joinid"].numpy() for t in datamodule.train_dataloader()])
    assert seen.size == np.unique(seen).size == datamodule.n_obs  # each cell once, from one of the two workers
