from __future__ import annotations

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp

from sctrilemma._cli import main


def test_train_then_embed(small_adata, tmp_path, capsys):
    path = tmp_path / "data.h5ad"
    small_adata.write_h5ad(path)
    model_dir = tmp_path / "model"
    assert main(["train", str(path), "--out", str(model_dir), "--donor-key", "donor", "--max-steps", "2"]) == 0
    assert (model_dir / "model.safetensors").exists()
    out = tmp_path / "embedded.h5ad"
    assert main(["embed", str(path), "--model", str(model_dir), "--out", str(out)]) == 0
    embedded = ad.read_h5ad(out)
    assert embedded.obsm["X_sctrilemma"].shape == (small_adata.n_obs, 64)
    assert not any(c.startswith("_scvi") for c in embedded.obs.columns)
    assert "Wrote" in capsys.readouterr().out


def test_train_refuses_normalised_input(small_adata, tmp_path, capsys):
    small_adata.X = sp.csr_matrix(np.log1p(small_adata.X.toarray().astype(np.float32)))
    path = tmp_path / "lognorm.h5ad"
    small_adata.write_h5ad(path)
    assert main(["train", str(path), "--out", str(tmp_path / "m")]) == 2
    error = capsys.readouterr().err
    assert "non-integer values" in error
    assert not (tmp_path / "m").exists()


def test_missing_input_file(tmp_path, capsys):
    assert (
        main(["embed", str(tmp_path / "nope.h5ad"), "--model", str(tmp_path), "--out", str(tmp_path / "o.h5ad")]) == 2
    )
    assert "error" in capsys.readouterr().err


@pytest.mark.slow
def test_example_main_job(tmp_path):
    assert main(["example", "--out", str(tmp_path), "--max-epochs", "1"]) == 0
    embedded = ad.read_h5ad(tmp_path / "example_embedded.h5ad")
    assert embedded.obsm["X_sctrilemma"].shape == (3000, 64)
    assert (tmp_path / "umap.png").stat().st_size > 10_000
    assert (tmp_path / "model" / "model.safetensors").exists()
