"""Import of the authors' Lightning checkpoint: safe reading, key mapping, numerical equivalence."""

from __future__ import annotations

import json
import os
import pickle
import random
import zipfile
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest
import torch

from sctrilemma.benchmark._reference import UpstreamStyleVAE
from sctrilemma.io._upstream import read_checkpoint_tensors, read_upstream_vocabulary, upstream_to_module_state
from sctrilemma.module import SCTrilemmaModule

if TYPE_CHECKING:
    from pathlib import Path

    import anndata as ad

V, D, K, M, HEADS = 300, 32, 4, 8, 4
SIZES = {"n_hidden": D, "n_latent_tokens": K, "n_encoder_layers": 1, "n_decoder_layers": 1, "n_prior_codes": M}


class FakeDictConfig:
    """Stands in for omegaconf's DictConfig: a class the reader cannot (and must not) import."""

    def __init__(self, content: dict) -> None:
        self._content = content
        self._flags = {"readonly": None}

    def __getstate__(self) -> dict:
        return {"_content": self._content, "_flags": self._flags}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


class Evil:
    """Pickles to a call that runs a shell command (and exec'ed Python) writing ``marker``."""

    def __init__(self, marker: Path, how: str = "system") -> None:
        self.marker, self.how = marker, how

    def __reduce__(self) -> tuple:
        if self.how == "system":
            return os.system, (f"touch '{self.marker}'",)
        return exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",)


def _randomised_reference(seed: int = 0, **kwargs) -> UpstreamStyleVAE:
    torch.manual_seed(seed)
    ref = UpstreamStyleVAE(V, **SIZES, n_heads=HEADS, dropout_rate=0.1, **kwargs)
    with torch.no_grad():
        for name, tensor in ref.state_dict().items():
            if name.endswith("num_batches_tracked"):
                tensor.fill_(17)
            elif name.endswith("running_var"):
                tensor.uniform_(0.5, 2.0)
            elif "norm" in name and name.endswith("weight"):  # RMSNorm and BatchNorm scales
                tensor.uniform_(0.7, 1.3)
            elif name.endswith("bias") or name.endswith("running_mean"):
                tensor.normal_(0.0, 0.2)
            elif name == "latent_queries":
                tensor.normal_(0.0, 1.0)
            elif name == "px_r":
                tensor.normal_(0.0, 1.0)
    return ref.eval()


def _save_lightning_like(ref: UpstreamStyleVAE, path: Path, **extra) -> None:
    checkpoint = {
        "state_dict": OrderedDict(("model." + k, v) for k, v in ref.state_dict().items()),
        "hyper_parameters": FakeDictConfig({"model": {"hidden": D, "heads": HEADS}}),
        "hparams_type": "DictConfig",
        "rng_state": {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),  # noqa: NPY002 - what Lightning stores
            "python": random.getstate(),
        },
        "epoch": 3,
        "global_step": 100,
        "pytorch-lightning_version": "2.6.0",
        "optimizer_states": [{"state": {0: {"exp_avg": torch.randn(V, D)}}}],
        **extra,
    }
    torch.save(checkpoint, path)


@pytest.fixture
def reference() -> UpstreamStyleVAE:
    return _randomised_reference()


@pytest.fixture
def checkpoint(reference: UpstreamStyleVAE, tmp_path: Path) -> Path:
    path = tmp_path / "final.ckpt"
    _save_lightning_like(reference, path)
    return path


@pytest.fixture
def counts(small_adata: ad.AnnData) -> torch.Tensor:
    """Real counts of 120 cells: the V-2 most expressed genes in columns 2..V-1, columns 0 and 1 empty."""
    x = small_adata.X.toarray() if hasattr(small_adata.X, "toarray") else np.asarray(small_adata.X)
    genes = np.sort(np.argsort(-x.sum(0))[: V - 2])
    dense = np.zeros((x.shape[0], V), dtype=np.float32)
    dense[:, 2:] = x[:, genes]
    dense = dense[dense.sum(1) > 0][:120]
    return torch.from_numpy(dense)


def _load_module(path: Path, crop_size: int) -> SCTrilemmaModule:
    state, config = upstream_to_module_state(read_checkpoint_tensors(path))
    module = SCTrilemmaModule(**config, n_heads=HEADS, crop_size=crop_size)
    module.load_state_dict(state, strict=True)
    return module.eval()


def test_reference_keys_are_the_upstream_layout(reference: UpstreamStyleVAE) -> None:
    keys = set(reference.state_dict())
    assert {"gene_embedding.gene_id_embedding.weight", "raw_proj.weight", "expr_mod.bias", "latent_queries",
            "encoder_blocks.0.attn.in_proj_weight", "encoder_blocks.0.ff.gate_proj.weight",
            "encoder_output_bn.norm.num_batches_tracked", "z_query_gate.2.weight", "decoder_blocks.0.norm_kv.weight",
            "output_proj.weight", "px_r", "tissue_prior_logvar.bias"} <= keys  # fmt: skip
    assert reference.latent_queries.shape == (1, K, D)
    assert "tissue_prior_mu.weight" not in UpstreamStyleVAE(V, **SIZES, n_heads=HEADS, with_prior=False).state_dict()


def test_read_checkpoint_tensors_round_trip(reference: UpstreamStyleVAE, checkpoint: Path) -> None:
    tensors = read_checkpoint_tensors(checkpoint)
    expected = reference.state_dict()
    assert set(tensors) == {"model." + k for k in expected}
    for key, value in expected.items():
        assert tensors["model." + key].dtype == value.dtype
        torch.testing.assert_close(tensors["model." + key], value, rtol=0, atol=0)


def test_weights_only_torch_load_refuses_a_lightning_checkpoint(reference: UpstreamStyleVAE, checkpoint: Path) -> None:
    """Why the package has its own reader: PyTorch's weights-only loader stops at the first non-tensor global."""
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(checkpoint, weights_only=True)
    assert set(read_checkpoint_tensors(checkpoint)) == {"model." + k for k in reference.state_dict()}


def test_read_checkpoint_tensors_dtypes_views_and_bare_state_dict(tmp_path: Path) -> None:
    base = torch.randn(4, 6)
    state = OrderedDict(
        half=torch.randn(5).half(),
        bf16=torch.randn(5).bfloat16(),
        long=torch.arange(7),
        flag=torch.tensor([True, False]),
        transposed=base.t(),
        sliced=base[1:3, 2:],
        scalar=torch.tensor(2.5, dtype=torch.float64),
        param=torch.nn.Parameter(torch.ones(3)),
        empty=torch.zeros(0, 3),
    )
    torch.save(state, tmp_path / "bare.pt")
    tensors = read_checkpoint_tensors(tmp_path / "bare.pt")
    assert set(tensors) == set(state)
    for key, value in state.items():
        assert tensors[key].dtype == value.dtype
        assert tensors[key].shape == value.shape
        torch.testing.assert_close(tensors[key], value.detach(), rtol=0, atol=0)


def test_upstream_to_module_state_config(checkpoint: Path) -> None:
    state, config = upstream_to_module_state(read_checkpoint_tensors(checkpoint))
    assert config == {
        "n_input": V, "n_hidden": D, "n_latent_tokens": K, "n_encoder_layers": 1, "n_decoder_layers": 1,
        "ffn_multiplier": 4.0, "prior": "pseudobulk", "n_prior_codes": M, "gene_encoding": "gate",
        "decoder_query": "gate", "pooling": "mean",
    }  # fmt: skip
    assert set(state) == set(SCTrilemmaModule(**config, n_heads=HEADS).state_dict())


def test_imported_module_matches_reference(reference: UpstreamStyleVAE, checkpoint: Path, counts: torch.Tensor) -> None:
    crop_size = V  # every expressed gene of every cell is a token
    module = _load_module(checkpoint, crop_size)
    genes = torch.tensor([0, 2, 5, 17, 64, 128, 200, V - 1])
    with torch.no_grad():
        out = module.inference(counts)
        ref_mu, ref_logvar = reference.encode(counts, crop_size)
        ref_embedding = reference.embed(counts, crop_size)
        ours_logits = module.decode(out["z_tokens"], out["z"], genes)
        ref_logits = reference.decode_logits(ref_mu, ref_mu.mean(1), genes)
    embedding_diff = (out["qz"].loc - ref_embedding).abs().max().item()
    token_diff = (out["qz_tokens_mean"] - ref_mu).abs().max().item()
    logvar_diff = (out["qz_tokens_logvar"] - ref_logvar).abs().max().item()
    logit_diff = (ours_logits - ref_logits).abs().max().item()
    print(f"max abs diff: embedding {embedding_diff:.2e}, tokens {token_diff:.2e}, "
          f"logvar {logvar_diff:.2e}, logits {logit_diff:.2e}")  # fmt: skip
    assert ref_embedding.abs().max() > 0.1  # not trivially zero
    assert embedding_diff < 1e-5
    assert token_diff < 1e-5
    assert logvar_diff < 1e-5
    assert logit_diff < 1e-4
    assert ref_logits.std() > 0.1


def test_imported_module_matches_reference_with_truncated_crop(
    reference: UpstreamStyleVAE, checkpoint: Path, counts: torch.Tensor
) -> None:
    # A crop shorter than most cells' expressed genes. Integer counts tie at the crop boundary and the
    # two implementations may break ties differently, so distinct jitter makes the top genes unique.
    crop_size = 24
    x = counts + (counts > 0) * torch.rand(counts.shape, generator=torch.Generator().manual_seed(1)) * 1e-2
    assert ((x > 0).sum(1) > crop_size).float().mean() > 0.5
    module = _load_module(checkpoint, crop_size)
    with torch.no_grad():
        diff = (module.inference(x)["qz"].loc - reference.embed(x, crop_size)).abs().max().item()
    print(f"max abs diff (crop {crop_size}): embedding {diff:.2e}")
    assert diff < 1e-5


def test_ablation_layouts_map(tmp_path: Path) -> None:
    ref = _randomised_reference(seed=1, with_prior=False)
    state = {"model." + k: v for k, v in ref.state_dict().items() if not k.startswith(("expr_mod.", "z_query_gate."))}
    module_state, config = upstream_to_module_state(state)
    assert (config["prior"], config["gene_encoding"], config["decoder_query"]) == ("normal", "additive", "none")
    assert "n_prior_codes" not in config
    SCTrilemmaModule(**config, n_heads=HEADS).load_state_dict(module_state, strict=True)


def test_upstream_to_module_state_reports_missing_and_unknown_keys(checkpoint: Path) -> None:
    tensors = read_checkpoint_tensors(checkpoint)
    del tensors["model.mu_proj.bias"], tensors["model.decoder_blocks.0.ff.gate_proj.weight"]
    tensors["model.extra_head.weight"] = torch.zeros(2)
    with pytest.raises(ValueError, match=r"Missing keys: \[.*decoder_blocks.0.ff.gate_proj.weight.*mu_proj.bias.*"
                                         r"Unknown keys: \['extra_head.weight'\]"):  # fmt: skip
        upstream_to_module_state(tensors)
    tensors = read_checkpoint_tensors(checkpoint)
    del tensors["model.tissue_prior_mu.bias"]  # a partial optional group
    with pytest.raises(ValueError, match="tissue_prior_mu.bias"):
        upstream_to_module_state(tensors)


# ------------------------------------------------------------------------------------------ hostile files
@pytest.mark.parametrize("how", ["system", "exec"])
def test_malicious_checkpoint_runs_no_code(reference: UpstreamStyleVAE, tmp_path: Path, how: str) -> None:
    marker = tmp_path / f"pwned_{how}"
    # Positive control: an ordinary unpickler does run the payload.
    pickle.loads(pickle.dumps(Evil(marker, how)))
    assert marker.exists()
    marker.unlink()

    path = tmp_path / "evil.ckpt"
    _save_lightning_like(reference, path, hyper_parameters=Evil(marker, how), callbacks={"cb": Evil(marker, how)})
    tensors = read_checkpoint_tensors(path)
    assert not marker.exists()
    assert set(tensors) == {"model." + k for k in reference.state_dict()}


def test_malicious_state_dict_entry_is_rejected(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": {"w": torch.zeros(2), "v": Evil(marker)}}, path)
    with pytest.raises(ValueError, match="not plain tensors"):
        read_checkpoint_tensors(path)
    assert not marker.exists()


def test_non_zip_files_are_rejected(tmp_path: Path) -> None:
    raw = tmp_path / "raw.ckpt"
    with raw.open("wb") as fh:
        pickle.dump({"state_dict": {"w": [1.0, 2.0]}}, fh)
    with pytest.raises(ValueError, match="not a zip-based torch checkpoint"):
        read_checkpoint_tensors(raw)
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.zeros(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(ValueError, match="not a zip-based torch checkpoint"):
        read_checkpoint_tensors(legacy)


@pytest.mark.parametrize("keep", [0.5, 0.95])
def test_truncated_checkpoint_is_rejected(checkpoint: Path, tmp_path: Path, keep: float) -> None:
    data = checkpoint.read_bytes()
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        read_checkpoint_tensors(truncated)


def test_corrupt_storage_is_rejected(checkpoint: Path, tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.ckpt"
    with zipfile.ZipFile(checkpoint) as src, zipfile.ZipFile(corrupt, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if "/data/" in info.filename and len(data) > 8:
                data = data[:-4]  # a storage record shorter than its tensors need
            dst.writestr(info, data)
    with pytest.raises(ValueError, match="corrupt torch checkpoint"):
        read_checkpoint_tensors(corrupt)


# ------------------------------------------------------------------------------------------ vocabulary
def test_read_upstream_vocabulary(tmp_path: Path) -> None:
    names = ["<pad>", "<mask>"] + [f"ENSG{i:011d}" for i in range(V - 2)]
    order = np.random.default_rng(0).permutation(V)
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps({names[i]: int(i) for i in order}))
    assert read_upstream_vocabulary(path) == names


@pytest.mark.parametrize(
    "vocab",
    [
        {"<pad>": 0, "<mask>": 1, "ENSG00000000003": 3},  # gap
        {"<pad>": 0, "<mask>": 1, "ENSG00000000003": 1},  # duplicate
        {"<pad>": 0, "<mask>": -1},  # negative
        {"<pad>": 0, "<mask>": 1.0},  # not an integer
        ["<pad>", "<mask>"],  # not an object
    ],
)
def test_read_upstream_vocabulary_rejects_non_permutations(tmp_path: Path, vocab: object) -> None:
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps(vocab))
    with pytest.raises(ValueError, match="permutation|integer|object"):
        read_upstream_vocabulary(path)


def test_import_upstream_checkpoint_end_to_end(
    reference: UpstreamStyleVAE, checkpoint: Path, counts: torch.Tensor, tmp_path: Path
) -> None:
    import anndata as ad
    import scipy.sparse as sp

    from sctrilemma import SCTrilemma
    from sctrilemma.io import import_upstream_checkpoint

    genes = ["<pad>", "<mask>"] + [f"ENSG{i:011d}" for i in range(V - 2)]
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({g: i for i, g in enumerate(genes)}))
    out = tmp_path / "imported"
    symbols = {g: f"GENE{i}" for i, g in enumerate(genes)}
    written = import_upstream_checkpoint(checkpoint, vocab, out, n_heads=HEADS, crop_size=V, gene_symbols=symbols)
    assert written.exists()
    model = SCTrilemma.load(out)
    assert model.is_trained
    assert list(model.gene_names_) == genes
    assert model.gene_symbols_[5] == "GENE5"
    assert model.pseudobulk_codebook_ is None
    # a query with the measured genes (Ensembl IDs with version suffixes), embedded zero-shot
    query = ad.AnnData(sp.csr_matrix(counts[:, 2:].numpy()), var=pd.DataFrame(index=[g + ".3" for g in genes[2:]]))
    embedded = SCTrilemma.load_query_data(query, out).get_latent_representation()
    with torch.no_grad():
        expected = reference.embed(counts, V).numpy()
    np.testing.assert_allclose(embedded, expected, atol=1e-5)
    with pytest.raises(ValueError, match="already exists"):
        import_upstream_checkpoint(checkpoint, vocab, out, n_heads=HEADS)


def test_import_refuses_a_mismatched_vocabulary(checkpoint: Path, tmp_path: Path) -> None:
    from sctrilemma.io import import_upstream_checkpoint

    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({f"G{i}": i for i in range(V - 5)}))
    with pytest.raises(ValueError, match="vocabulary has 295 entries"):
        import_upstream_checkpoint(checkpoint, vocab, tmp_path / "out")
