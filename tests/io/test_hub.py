"""scvi-hub: metadata and model card for a saved reference, HubModel loading, and a pull from a local stand-in."""

from __future__ import annotations

import json
import shutil
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("huggingface_hub")
from scvi.hub import HubModel

from sctrilemma import SCTrilemma
from sctrilemma.data import blood_reference_dir, example_reference_dir, load_example
from sctrilemma.data._example import HELD_OUT_DONORS
from sctrilemma.io import pull_hub_reference, write_hub_files

CARD = {
    "license_info": "cc-by-4.0",
    "description": "A small SCTrilemma reference of control PBMCs.",
    "training_data": "1,800 control PBMCs of 3 donors, Kang et al. 2018 (10x v1).",
    "intended_use": "Embedding PBMC queries zero-shot; not for other tissues.",
}


@pytest.fixture
def hub_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "hub"
    shutil.copytree(example_reference_dir(), directory)
    write_hub_files(directory, metrics={"knn_balanced_accuracy": 0.993}, tissues=["blood"], **CARD)
    return directory


def _query():
    adata = load_example()
    query = adata[adata.obs["donor"].isin(HELD_OUT_DONORS)].copy()
    query.var_names = query.var["gene_symbol"].astype(str).to_numpy()  # genes by symbol only, as users often have
    query.var_names_make_unique()
    return query.copy()


def test_hub_files_describe_the_model(hub_dir: Path) -> None:
    metadata = json.loads((hub_dir / "_scvi_required_metadata.json").read_text())
    assert metadata["model_cls_name"] == "SCTrilemma"
    assert metadata["model_parent_module"] == "sctrilemma"
    card = (hub_dir / "README.md").read_text()
    for text in (*CARD.values(), "knn_balanced_accuracy", "donor_key"):
        assert text.split(";")[0] in card
    assert json.loads((hub_dir / "metrics.json").read_text()) == {"knn_balanced_accuracy": 0.993}
    with pytest.raises(FileExistsError):
        write_hub_files(hub_dir, **CARD)  # no silent overwrite


def test_hub_model_loads_a_query_as_load_query_data_does(hub_dir: Path) -> None:
    query = _query()
    expected = SCTrilemma.load_query_data(query, example_reference_dir()).get_latent_representation()
    prepared = SCTrilemma.prepare_query_anndata(query, str(hub_dir), inplace=False)
    hub_model = HubModel(str(hub_dir))
    hub_model.load_model(adata=prepared)
    assert isinstance(hub_model.model, SCTrilemma)
    np.testing.assert_allclose(hub_model.model.get_latent_representation(), expected, rtol=1e-5, atol=1e-6)


def test_pull_fetches_the_safe_weights_from_a_repository(hub_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """A stand-in for ``huggingface_hub.snapshot_download``: copies the matching files of a local 'repository'."""
    import huggingface_hub

    (hub_dir / "model.pt").write_bytes(b"not fetched")  # a file outside the allowed patterns stays behind
    shutil.copy(blood_reference_dir() / "reference_cells.h5ad", hub_dir)  # embedded reference cells travel along
    requested = {}

    def snapshot_download(repo_id, revision=None, cache_dir=None, allow_patterns=None, **kwargs):
        requested.update(repo_id=repo_id, revision=revision, patterns=list(allow_patterns))
        target = tmp_path / "snapshot"
        target.mkdir(exist_ok=True)
        for path in hub_dir.iterdir():
            if any(fnmatch(path.name, pattern) for pattern in allow_patterns):
                shutil.copy(path, target / path.name)
        return str(target)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    hub_model = pull_hub_reference("sctrilemma/pbmc-example", revision="v1")
    assert requested["repo_id"] == "sctrilemma/pbmc-example"
    assert requested["revision"] == "v1"
    folder = Path(hub_model.local_dir)
    assert (folder / "model.safetensors").is_file()
    assert not (folder / "model.pt").exists()
    assert (folder / "reference_cells.h5ad").is_file()
    prepared = SCTrilemma.prepare_query_anndata(_query(), hub_model.local_dir, inplace=False)
    hub_model.load_model(adata=prepared)
    assert hub_model.model.get_latent_representation().shape == (prepared.n_obs, 64)

    (folder / "model.safetensors").unlink()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda **kwargs: str(folder))
    with pytest.raises(ValueError, match="has no model.safetensors"):
        pull_hub_reference("someone/scvi-model")


def test_card_has_an_evaluation_section_and_the_labelling_call_of_a_labelled_reference(tmp_path: Path) -> None:
    directory = tmp_path / "labelled"
    shutil.copytree(blood_reference_dir(), directory)
    write_hub_files(
        directory, evaluation="| split | accuracy |\n|---|---|\n| CellBench | 1.000 |", overwrite=True, **CARD
    )
    card = (directory / "README.md").read_text()
    assert "## Evaluation\n\n| split | accuracy |" in card
    assert "labels = model.predict_labels()" in card  # the blood reference carries a label classifier
    shutil.copytree(example_reference_dir(), tmp_path / "unlabelled")
    write_hub_files(tmp_path / "unlabelled", **CARD)
    card = (tmp_path / "unlabelled" / "README.md").read_text()
    assert "## Evaluation" not in card
    assert "predict_labels" not in card
