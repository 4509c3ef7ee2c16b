"""The single-file safetensors reference: round trip, overwrite, refusal of pickles, corruption, atomic saves."""

from __future__ import annotations

import json
import os
import pickle
import struct
from pathlib import Path

import anndata as ad
import numpy as np
import pytest
import scvi
import torch

from sctrilemma import SCTrilemma
from sctrilemma.data import load_example

REFERENCE_FILE = "model.safetensors"


def _subset(n_per_donor: int, seed: int) -> ad.AnnData:
    adata = load_example()
    rng = np.random.default_rng(seed)
    donors = adata.obs["donor"].astype(str).to_numpy()
    keep = np.sort(
        np.concatenate([rng.choice(np.flatnonzero(donors == d), n_per_donor, replace=False) for d in np.unique(donors)])
    )
    return adata[keep].copy()


def _train(adata: ad.AnnData, seed: int, sizes: dict) -> SCTrilemma:
    scvi.settings.seed = seed
    SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = SCTrilemma(adata, **sizes, preset="paper")
    model.train(max_epochs=1, batch_size=128, enable_progress_bar=False)
    return model


@pytest.fixture(scope="module")
def adata() -> ad.AnnData:
    return _subset(80, seed=0)


@pytest.fixture(scope="module")
def model(adata: ad.AnnData, tiny_sizes: dict) -> SCTrilemma:
    return _train(adata, seed=0, sizes=tiny_sizes)


@pytest.fixture(scope="module")
def other_model(adata: ad.AnnData, tiny_sizes: dict) -> SCTrilemma:
    """A second model on the same data, trained from another seed (different weights)."""
    return _train(adata.copy(), seed=1, sizes=tiny_sizes)


@pytest.fixture(scope="module")
def latent(model: SCTrilemma) -> np.ndarray:
    return model.get_latent_representation()


@pytest.fixture(scope="module")
def saved(model: SCTrilemma, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("reference") / "model"
    model.save(directory)
    return directory


def _fresh(adata: ad.AnnData) -> ad.AnnData:
    """Unregistered copy of the data (no scvi-tools manager attached)."""
    return ad.AnnData(X=adata.X.copy(), obs=adata.obs[["donor", "cell_type"]].copy(), var=adata.var.copy())


def _copy_reference(saved: Path, destination: Path) -> Path:
    destination.mkdir(parents=True)
    (destination / REFERENCE_FILE).write_bytes((saved / REFERENCE_FILE).read_bytes())
    return destination


# ------------------------------------------------------------------ round trip
def test_saves_a_single_safetensors_file(saved: Path) -> None:
    assert sorted(os.listdir(saved)) == [REFERENCE_FILE]
    with open(saved / REFERENCE_FILE, "rb") as stream:
        header_size = struct.unpack("<Q", stream.read(8))[0]
        header = json.loads(stream.read(header_size))
    metadata = header["__metadata__"]
    assert metadata["format"] == "sctrilemma-reference"
    assert {"config", "registry", "genes", "gene_symbols", "codebook", "checksum"} <= set(metadata)
    assert "pseudobulk.centroids" in header
    assert all(key.startswith(("module.", "pseudobulk.", "split.", "__metadata__")) for key in header)


@pytest.mark.parametrize("with_adata", [True, False])
def test_round_trip(model: SCTrilemma, adata: ad.AnnData, latent: np.ndarray, saved: Path, with_adata: bool) -> None:
    loaded = SCTrilemma.load(saved, adata=adata) if with_adata else SCTrilemma.load(saved)
    text = repr(loaded)
    assert "SCTrilemma" in text
    assert "trained" in text
    assert "not trained" not in text
    assert f"{adata.n_vars} genes" in text
    assert (f"{adata.n_obs} cells" in text) if with_adata else ("no data" in text)
    if with_adata:
        assert loaded.adata is adata
        embedding = loaded.get_latent_representation()
    else:
        assert loaded.adata is None
        embedding = loaded.get_latent_representation(_fresh(adata))
    assert loaded is not model
    np.testing.assert_allclose(embedding, latent, atol=1e-6)

    # weights: same keys, dtypes, shapes and values
    original, restored = model.module.state_dict(), loaded.module.state_dict()
    assert list(restored) == list(original)
    for key, tensor in original.items():
        assert restored[key].dtype == tensor.dtype, key
        assert torch.equal(restored[key].cpu(), tensor.cpu()), key
    assert not loaded.module.training

    # gene vocabulary and symbols
    assert loaded.gene_names_.tolist() == adata.var_names.tolist()
    assert loaded.gene_symbols_.tolist() == adata.var["gene_symbol"].astype(str).tolist()

    # PB-Cond codebook
    codebook, restored_codebook = model.pseudobulk_codebook_, loaded.pseudobulk_codebook_
    assert restored_codebook is not None
    assert restored_codebook["centroids"].dtype == np.float64
    np.testing.assert_array_equal(restored_codebook["centroids"], codebook["centroids"])
    assert restored_codebook["sigma"] == codebook["sigma"]
    assert restored_codebook["temperature"] == codebook["temperature"]
    assert loaded.prior_ == model.prior_ == "pseudobulk"

    # training state
    assert loaded.is_trained is True
    assert sorted(loaded.history) == sorted(model.history)
    assert "train_loss" in loaded.history
    for name, frame in model.history.items():
        restored_frame = loaded.history[name]
        assert restored_frame.index.tolist() == [int(i) for i in frame.index], name
        np.testing.assert_allclose(
            restored_frame.iloc[:, 0].to_numpy(dtype=float), frame.iloc[:, 0].to_numpy(dtype=float), rtol=0, atol=0
        )

    # registry
    assert loaded.registry_["setup_args"] == model.registry_["setup_args"]
    assert loaded.summary_stats.n_vars == adata.n_vars


def test_load_without_adata_then_embed(adata: ad.AnnData, latent: np.ndarray, saved: Path) -> None:
    loaded = SCTrilemma.load(saved)
    data = _fresh(adata)
    np.testing.assert_allclose(loaded.get_latent_representation(data), latent, atol=1e-6)
    # a subset of cells of new data gives the matching rows
    np.testing.assert_allclose(
        loaded.get_latent_representation(_fresh(adata), indices=np.arange(10, 30)), latent[10:30], atol=1e-6
    )


def test_overwrite(
    model: SCTrilemma, other_model: SCTrilemma, adata: ad.AnnData, latent: np.ndarray, tmp_path: Path
) -> None:
    directory = tmp_path / "reference"
    model.save(directory)
    before = (directory / REFERENCE_FILE).read_bytes()
    with pytest.raises(ValueError, match="already exists"):
        other_model.save(directory)
    assert (directory / REFERENCE_FILE).read_bytes() == before
    with pytest.raises(ValueError, match="already exists"):
        other_model.save(directory, overwrite=False)

    other_model.save(directory, overwrite=True)
    assert sorted(os.listdir(directory)) == [REFERENCE_FILE]
    other_latent = other_model.get_latent_representation()
    assert np.abs(other_latent - latent).max() > 1e-3  # the two models really differ
    replaced = SCTrilemma.load(directory).get_latent_representation(_fresh(adata))
    np.testing.assert_allclose(replaced, other_latent, atol=1e-6)


# ------------------------------------------------------------------ refusing pickles
class _Exploit:
    """Unpickling this creates ``path`` (stands in for arbitrary code execution)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_malicious_pickle_is_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"state_dict": _Exploit(str(marker))})

    # (a) a legacy pickle-based model.pt in an otherwise empty directory
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "model.pt").write_bytes(payload)
    with pytest.raises(ValueError, match="pickle"):
        SCTrilemma.load(legacy)
    # also in torch.save's zip container
    zipped = tmp_path / "zipped"
    zipped.mkdir()
    torch.save({"state_dict": _Exploit(str(marker))}, zipped / "model.pt")
    with pytest.raises(ValueError, match="pickle"):
        SCTrilemma.load(zipped)
    assert not marker.exists()

    # (b) the same bytes disguised as the reference file
    disguised = tmp_path / "disguised"
    disguised.mkdir()
    (disguised / REFERENCE_FILE).write_bytes(payload)
    with pytest.raises(ValueError):  # noqa: PT011 - any ValueError, as long as nothing is executed
        SCTrilemma.load(disguised)
    (disguised / REFERENCE_FILE).write_bytes((zipped / "model.pt").read_bytes())
    with pytest.raises(ValueError):  # noqa: PT011
        SCTrilemma.load(disguised)
    assert not marker.exists()

    # sanity check, last: the payload really is malicious
    sanity_marker = tmp_path / "sanity"
    pickle.loads(pickle.dumps(_Exploit(str(sanity_marker))))
    assert sanity_marker.exists()
    assert not marker.exists()


def test_empty_directory_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="No sctrilemma reference"):
        SCTrilemma.load(tmp_path)


# ------------------------------------------------------------------ damaged or foreign files
def test_truncated_file(saved: Path, tmp_path: Path) -> None:
    directory = _copy_reference(saved, tmp_path / "truncated")
    data = (directory / REFERENCE_FILE).read_bytes()
    (directory / REFERENCE_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        SCTrilemma.load(directory)
    (directory / REFERENCE_FILE).write_bytes(data[:-1])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        SCTrilemma.load(directory)
    (directory / REFERENCE_FILE).write_bytes(b"")
    with pytest.raises(ValueError, match="truncated or corrupt"):
        SCTrilemma.load(directory)


def _read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return {key: handle.get_tensor(key) for key in handle.keys()}, dict(handle.metadata())


def test_tampered_metadata_fails_checksum(saved: Path, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    directory = _copy_reference(saved, tmp_path / "tampered")
    tensors, metadata = _read(directory / REFERENCE_FILE)
    # an untouched rewrite still loads: the checksum does not depend on the file layout
    save_file(tensors, str(directory / REFERENCE_FILE), metadata=metadata)
    SCTrilemma.load(directory)

    codebook = json.loads(metadata["codebook"])
    codebook["temperature"] = 2 * codebook["temperature"]
    tampered = {**metadata, "codebook": json.dumps(codebook)}
    save_file(tensors, str(directory / REFERENCE_FILE), metadata=tampered)
    with pytest.raises(ValueError, match="checksum"):
        SCTrilemma.load(directory)

    genes = json.loads(metadata["genes"])
    genes[0], genes[1] = genes[1], genes[0]
    save_file(tensors, str(directory / REFERENCE_FILE), metadata={**metadata, "genes": json.dumps(genes)})
    with pytest.raises(ValueError, match="checksum"):
        SCTrilemma.load(directory)


def test_tampered_tensor_fails_checksum(saved: Path, tmp_path: Path) -> None:
    directory = _copy_reference(saved, tmp_path / "flipped")
    path = directory / REFERENCE_FILE
    data = bytearray(path.read_bytes())
    header_size = struct.unpack("<Q", bytes(data[:8]))[0]
    header = json.loads(bytes(data[8 : 8 + header_size]))
    start, _ = header["module.decoder.px_r"]["data_offsets"]
    position = 8 + header_size + start + 1
    data[position] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        SCTrilemma.load(directory)

    # a flip in the centroids (stored outside the module) is caught too
    data[position] ^= 0x01
    start, _ = header["pseudobulk.centroids"]["data_offsets"]
    data[8 + header_size + start + 3] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        SCTrilemma.load(directory)


def test_dropped_tensor_fails_checksum(saved: Path, tmp_path: Path) -> None:
    """Dropping a tensor changes the checksum too (not only edits of existing bytes)."""
    from safetensors.torch import save_file

    directory = _copy_reference(saved, tmp_path / "dropped")
    tensors, metadata = _read(directory / REFERENCE_FILE)
    del tensors["pseudobulk.centroids"]
    save_file(tensors, str(directory / REFERENCE_FILE), metadata=metadata)
    with pytest.raises(ValueError, match="checksum"):
        SCTrilemma.load(directory)


def test_other_safetensors_file(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"weight": torch.ones(3, 2)}, str(tmp_path / REFERENCE_FILE), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="not an sctrilemma reference"):
        SCTrilemma.load(tmp_path)
    save_file({"weight": torch.ones(3, 2)}, str(tmp_path / REFERENCE_FILE))
    with pytest.raises(ValueError, match="not an sctrilemma reference"):
        SCTrilemma.load(tmp_path)


def test_other_format_version(saved: Path, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    directory = _copy_reference(saved, tmp_path / "future")
    tensors, metadata = _read(directory / REFERENCE_FILE)
    save_file(tensors, str(directory / REFERENCE_FILE), metadata={**metadata, "format_version": "99"})
    with pytest.raises(ValueError, match="reference format 99"):
        SCTrilemma.load(directory)


# ------------------------------------------------------------------ atomic save
def test_crash_during_save_keeps_old_reference(
    model: SCTrilemma,
    other_model: SCTrilemma,
    adata: ad.AnnData,
    latent: np.ndarray,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import safetensors.torch

    directory = tmp_path / "reference"
    model.save(directory)
    before = (directory / REFERENCE_FILE).read_bytes()
    targets: list[str] = []

    def crashing_save_file(tensors, filename, metadata=None) -> None:
        targets.append(str(filename))
        with open(filename, "wb") as stream:
            stream.write(b"\x00garbage" * 1000)
        raise RuntimeError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", crashing_save_file)
    with pytest.raises(RuntimeError, match="disk full"):
        other_model.save(directory, overwrite=True)
    monkeypatch.undo()

    assert len(targets) == 1
    assert Path(targets[0]).parent == directory  # the temporary file sits next to the target...
    assert Path(targets[0]).name != REFERENCE_FILE  # ...and is not the target itself
    assert sorted(os.listdir(directory)) == [REFERENCE_FILE]  # no temporary file left behind
    assert (directory / REFERENCE_FILE).read_bytes() == before
    restored = SCTrilemma.load(directory).get_latent_representation(_fresh(adata))
    np.testing.assert_allclose(restored, latent, atol=1e-6)
    assert np.abs(other_model.get_latent_representation() - latent).max() > 1e-3
