"""Training SCTrilemma from a streamed SOMA source, saving it as a normal reference, and real 2-process DDP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_sizes import TINY

pytest.importorskip("tiledbsoma")
pytest.importorskip("tiledbsoma_ml")
cellxgene_census = pytest.importorskip("cellxgene_census")

from sctrilemma import SCTrilemma  # noqa: E402
from sctrilemma.data import CENSUS_OBS_FILTER, build_example_census, load_example  # noqa: E402
from sctrilemma.data._census import example_census_anndata  # noqa: E402

DDP_SCRIPT = Path(__file__).with_name("_ddp_census_script.py")
# A guard against a hung process group only: two cold processes each import torch and scvi-tools (about a minute on a
# loaded 2-core machine) before 4 tiny steps; the former 300 s limit was within reach of a busy machine.
DDP_TIMEOUT_S = 60 * 60
DISTRIBUTED_ENV = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "STANDALONE_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK"}
    | {"LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"}
)


@pytest.fixture(scope="module")
def census_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_example_census(tmp_path_factory.mktemp("census") / "mini_census")


@pytest.fixture(scope="module")
def census_model(census_dir: Path, tmp_path_factory: pytest.TempPathFactory, tiny_sizes: dict) -> SCTrilemma:
    census = cellxgene_census.open_soma(uri=str(census_dir))
    model = SCTrilemma.from_census(
        census, batch_size=64, cache_dir=tmp_path_factory.mktemp("cache"), preset="small", **tiny_sizes
    )
    model.train(max_steps=3, accelerator="cpu", enable_progress_bar=False)
    return model


def test_census_from_census_builds_the_vocabulary_and_groups(census_model: SCTrilemma):
    example = load_example()
    np.testing.assert_array_equal(census_model.gene_names_, example.var_names.to_numpy())
    assert census_model.registry_["setup_args"]["donor_key"] == "donor_id"
    assert census_model.is_trained_
    assert np.isfinite(census_model.history["train_loss"].to_numpy(dtype=float)).all()
    # PB-Cond: 5 (dataset, donor) groups, fewer than n_prior_codes, so M = 5 centroids over all genes
    assert census_model.pseudobulk_codebook.centroids.shape == (5, example.n_vars)


def test_census_reference_saves_loads_and_embeds_in_memory_data(
    census_model: SCTrilemma, census_dir, tmp_path, tiny_sizes: dict
):
    census_model.save(tmp_path / "reference")
    with cellxgene_census.open_soma(uri=str(census_dir)) as census:
        obs = cellxgene_census.get_obs(
            census, "Homo sapiens", value_filter=CENSUS_OBS_FILTER, column_names=["soma_joinid", "obs_id"]
        )
    joinids, streamed = census_model.get_latent_representation_soma(str(census_dir))
    np.testing.assert_array_equal(joinids, obs["soma_joinid"].to_numpy())
    query = load_example()[obs["obs_id"].to_numpy()].copy()
    # the same dataset-donor groups as the source: the embedding is centred on each group's prior mean
    query.obs[["dataset_id", "donor_id"]] = example_census_anndata().obs.loc[
        query.obs_names, ["dataset_id", "donor_id"]
    ]
    loaded = SCTrilemma.load_query_data(query, tmp_path / "reference")
    in_memory = loaded.get_latent_representation()
    assert in_memory.shape == (obs.shape[0], tiny_sizes["n_hidden"])
    np.testing.assert_allclose(in_memory, streamed, atol=1e-5)
    # a query with another gene set maps zero-shot too
    subset = load_example()[:200, :2000].copy()
    assert np.isfinite(SCTrilemma.load_query_data(subset, tmp_path / "reference").get_latent_representation()).all()


def test_census_training_errors(census_model: SCTrilemma, census_dir, tiny_sizes: dict):
    with pytest.raises(ValueError, match="SyncBatchNorm, which runs only on GPU"):
        census_model.train(max_steps=1, accelerator="cpu", sync_batchnorm=True)
    other = load_example()[:, :100].copy()
    SCTrilemma.setup_anndata(other)
    model = SCTrilemma(other, preset="small", **tiny_sizes)
    model.is_trained_ = True
    with pytest.raises(ValueError, match="not the model's .* genes"):
        model.get_latent_representation_soma(str(census_dir))


@pytest.mark.slow
def test_census_ddp_two_cpu_processes(census_dir: Path, tmp_path: Path):
    """Real DDP with 2 gloo processes: disjoint shards, identical weights and BatchNorm statistics, a usable reference."""
    # Lightning picks a free port unless MASTER_PORT (or STANDALONE_PORT) is set: drop the rendezvous settings of any
    # job this suite runs inside, so the two ranks never join, or collide with, another job's process group.
    inherited = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV and not k.startswith("SLURM_")}
    env = {**inherited, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    working_directory = tmp_path / "cwd"  # the test's own directory: no log folder may appear in it
    working_directory.mkdir()
    result = subprocess.run(
        [sys.executable, str(DDP_SCRIPT), str(census_dir), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=DDP_TIMEOUT_S,
        check=False,
        cwd=working_directory,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(working_directory.iterdir()) == []  # no lightning_logs/ (history kept in a temporary directory)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    seen = [set(r["seen"]) for r in ranks]
    assert len(seen[0]) == len(ranks[0]["seen"]) == 4 * 64  # 4 steps of 64 cells, no repeats
    assert not seen[0] & seen[1]
    np.testing.assert_array_equal(ranks[0]["weights"], ranks[1]["weights"])
    # Each rank normalised different cells; equal running statistics mean the BatchNorm statistics were all-reduced.
    np.testing.assert_allclose(ranks[0]["running_mean"], ranks[1]["running_mean"], rtol=1e-6)
    assert np.isfinite(ranks[0]["loss"]).all()
    query = load_example()[:300].copy()
    embedding = SCTrilemma.load_query_data(query, tmp_path / "reference").get_latent_representation()
    assert embedding.shape == (300, TINY["n_hidden"])
    assert np.isfinite(embedding).all()
