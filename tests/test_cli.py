from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pytest
import scipy.sparse as sp
import scvi
from safetensors.numpy import load_file

import sctrilemma
from sctrilemma._cli import build_parser, main
from sctrilemma._cli_checks import HDF5_SIGNATURE, check_model_dir, h5ad_columns

HEAVY_MODULES = ("torch", "scvi", "anndata", "scanpy", "lightning", "h5py")
COMMANDS = ("train", "embed", "score", "example")

# Runs in a fresh interpreter: every call must answer without importing a heavy library.
_LIGHT_CALLS = """
import sys
from sctrilemma._cli import main

calls = [
    ["--help"], ["train", "--help"], ["embed", "--help"], ["score", "--help"], ["example", "--help"],
    ["train", "in.h5ad", "--out", "m", "--preset", "big"],
    ["train", "missing.h5ad", "--out", "m"],
    ["train", "cells.csv", "--out", "m"],
    ["train", "signature_only.h5ad", "--out", "saved"],
    ["embed", "signature_only.h5ad", "--model", "not_a_model", "--out", "o.h5ad"],
    ["train", "in.h5ad", "--out", "m", "--max-time", "00:04:00"],
]
codes = []
for argv in calls:
    try:
        codes.append(main(argv))
    except SystemExit as exit:
        codes.append(exit.code)
print(codes)
print(sorted(name for name in sys.argv[1:] if name in sys.modules))
"""


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
    # --model may name the model file instead of its directory.
    from_file = tmp_path / "from_file.h5ad"
    assert main(["embed", str(path), "--model", str(model_dir / "model.safetensors"), "--out", str(from_file)]) == 0
    np.testing.assert_allclose(ad.read_h5ad(from_file).obsm["X_sctrilemma"], embedded.obsm["X_sctrilemma"], atol=1e-5)


def test_train_max_time_bounds_training_by_the_clock(small_adata, tmp_path, monkeypatch):
    path = tmp_path / "data.h5ad"
    small_adata.write_h5ad(path)
    calls = []
    original = sctrilemma.SCTrilemma.train

    def recording_train(self, **kwargs):
        calls.append(kwargs)
        return original(self, **kwargs)

    monkeypatch.setattr(sctrilemma.SCTrilemma, "train", recording_train)
    # Without the budget reaching Lightning, 10,000 epochs would not end this test.
    assert main(["train", str(path), "--out", str(tmp_path / "m"), "--max-time", "1"]) == 0
    assert calls[0]["max_time"] == timedelta(seconds=1)
    assert calls[0]["max_epochs"] == 10_000
    assert calls[0]["max_steps"] is None
    assert (tmp_path / "m" / "model.safetensors").exists()


@pytest.mark.parametrize(
    ("value", "budget"),
    [
        ("00:00:04:00", timedelta(minutes=4)),
        ("1:02:03:04", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("90.5", timedelta(seconds=90.5)),
    ],
)
def test_max_time_accepts_lightning_strings_and_seconds(value, budget):
    args = build_parser().parse_args(["train", "in.h5ad", "--out", "m", "--max-time", value])
    assert args.max_time == budget


@pytest.mark.parametrize("value", ["00:04:00", "4m", "ten", "0", "-5", "00:00:00:00", "inf", "1e300"])
def test_max_time_refuses_other_values_before_reading(value, tmp_path, capsys):
    with pytest.raises(SystemExit, match="2"):
        main(["train", str(tmp_path / "missing.h5ad"), "--out", str(tmp_path / "m"), "--max-time", value])
    error = capsys.readouterr().err
    assert "argument --max-time: expected" in error
    assert "does not exist" not in error


def test_train_seed_makes_runs_reproducible(small_adata, tmp_path):
    path = tmp_path / "data.h5ad"
    small_adata.write_h5ad(path)
    weights = []
    for run in ("first", "second"):
        # The first run moves the global random state on: only --seed can make the second one start the same.
        assert main(["train", str(path), "--out", str(tmp_path / run), "--max-steps", "1", "--seed", "7"]) == 0
        weights.append(load_file(tmp_path / run / "model.safetensors"))
    assert scvi.settings.seed == 7
    assert weights[0].keys() == weights[1].keys()
    for name, tensor in weights[0].items():
        np.testing.assert_allclose(weights[1][name], tensor, atol=1e-5, err_msg=name)


def test_train_refuses_normalised_input(small_adata, tmp_path, capsys):
    small_adata.X = sp.csr_matrix(np.log1p(small_adata.X.toarray().astype(np.float32)))
    path = tmp_path / "lognorm.h5ad"
    small_adata.write_h5ad(path)
    assert main(["train", str(path), "--out", str(tmp_path / "m")]) == 2
    error = capsys.readouterr().err
    assert "non-integer values" in error
    assert not (tmp_path / "m").exists()


def test_help_and_argument_errors_import_no_heavy_library(tmp_path):
    (tmp_path / "cells.csv").write_text("cell,gene\nc1,1\n")
    (tmp_path / "signature_only.h5ad").write_bytes(HDF5_SIGNATURE + bytes(64))
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "model.safetensors").write_bytes(b"")
    (tmp_path / "not_a_model").mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(sctrilemma.__file__).parents[1])}
    result = subprocess.run(
        [sys.executable, "-c", _LIGHT_CALLS, *HEAVY_MODULES],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a guard only: this takes well under a second
        check=True,
    )
    codes, imported = result.stdout.strip().splitlines()[-2:]
    assert codes == str([0] * 5 + [2] * 6)
    assert imported == "[]"
    assert "Traceback" not in result.stderr
    assert "pass --overwrite to replace it" in result.stderr


def test_help_lists_every_command_with_defaults(capsys):
    with pytest.raises(SystemExit, match="0"):
        main(["--help"])
    top = capsys.readouterr().out
    assert all(f"    {command} " in top for command in COMMANDS)
    expected = {
        "train": [
            "(default: small on every machine, as in SCTrilemma(adata); paper is the published model)",
            "(default: the preset's, 64 for small and 256 for paper)",
            "scVI's heuristic",
            "--overwrite",
            "DD:HH:MM:SS as in Lightning's max_time (e.g. 00:00:04:00) or a number of seconds (e.g. 240)",
            "random seed (scvi.settings.seed), set before the model is built (default: 0)",
        ],
        "embed": ["(default: scvi.settings.batch_size, 128)"],
        "score": ["(default: 20)", "(default: 42)"],
        "example": ["(default: outputs)", "(default: 20)", "(default: 0)"],
    }
    for command, snippets in expected.items():
        with pytest.raises(SystemExit, match="0"):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert all(snippet in text for snippet in snippets), (command, text)


def test_missing_obs_key_is_reported_before_torch_is_imported(small_adata, tmp_path):
    path = tmp_path / "data.h5ad"
    small_adata.write_h5ad(path)
    script = (
        "import sys\n"
        "from sctrilemma._cli import main\n"
        "code = main(sys.argv[1:])\n"
        "print(code, sorted(name for name in ('torch', 'scvi', 'anndata', 'lightning') if name in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(sctrilemma.__file__).parents[1])}
    result = subprocess.run(
        [sys.executable, "-c", script, "train", str(path), "--out", str(tmp_path / "m"), "--donor-key", "donr"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a guard only: this takes about a second
        check=True,
    )
    assert result.stdout.split("\n")[-2] == "2 []"
    assert result.stderr.count("\n") == 1
    assert f"--donor-key 'donr' is not a column of .obs in input file {path}; did you mean 'donor'?" in result.stderr
    assert "available columns: donor, cell_type, condition, batch." in result.stderr
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    ("option", "key", "group"),
    [("--label-key", "celltype", "obs"), ("--condition-key", "disease", "obs"), ("--symbol-key", "symbol", "var")],
)
def test_score_checks_column_options_before_reading(small_adata, tmp_path, capsys, option, key, group):
    path = tmp_path / "data.h5ad"
    small_adata.write_h5ad(path)
    keys = {"--label-key": "cell_type", "--donor-key": "donor", option: key}
    argv = ["score", str(path), "--embedding-key", "X_pca", "--out", str(tmp_path / "s")]
    assert main([*argv, *(part for pair in keys.items() for part in pair)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert f"{option} {key!r} is not a column of .{group} in input file {path}" in error
    available = "gene_symbol" if group == "var" else "donor, cell_type, condition, batch"
    assert f"available columns: {available}" in error


def test_h5ad_columns_reads_current_and_legacy_layouts(small_adata, tmp_path):
    current = tmp_path / "current.h5ad"
    small_adata.write_h5ad(current)
    assert h5ad_columns(current) == list(small_adata.obs.columns)
    assert h5ad_columns(current, "var") == list(small_adata.var.columns)
    legacy = tmp_path / "legacy.h5ad"  # anndata < 0.7: obs is one compound dataset with an `index` field
    table = np.array([(b"c1", b"d1", 3)], dtype=[("index", "S2"), ("donor", "S2"), ("n_genes", "i8")])
    with h5py.File(legacy, "w") as file:
        file.create_dataset("obs", data=table)
    assert h5ad_columns(legacy) == ["donor", "n_genes"]


def test_model_may_name_the_model_file(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert check_model_dir(str(tmp_path / "model.safetensors")) == tmp_path
    assert check_model_dir(str(tmp_path)) == tmp_path


@pytest.mark.parametrize("value", ["0", "-3", "ten"])
def test_max_epochs_must_be_a_positive_integer(value, capsys):
    with pytest.raises(SystemExit, match="2"):
        main(["train", "in.h5ad", "--out", "m", "--max-epochs", value])
    assert "expected a positive integer" in capsys.readouterr().err


def _bad_input(tmp_path: Path, kind: str) -> tuple[Path, str]:
    if kind == "missing":
        return tmp_path / "nope.h5ad", "does not exist"
    if kind == "csv":
        path = tmp_path / "cells.csv"
        path.write_text("cell,GAPDH\nc1,3\n")
        return path, "is not an HDF5/.h5ad file"
    if kind == "directory":
        path = tmp_path / "folder.h5ad"
        path.mkdir()
        return path, "is a directory"
    path = tmp_path / "corrupt.h5ad"
    path.write_bytes(HDF5_SIGNATURE + b"\x00garbage" * 50)
    return path, "could not be read as AnnData"


def _command(command: str, path: Path, tmp_path: Path) -> list[str]:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "model.safetensors").write_bytes(b"")
    return {
        "train": ["train", str(path), "--out", str(tmp_path / "new_model")],
        "embed": ["embed", str(path), "--model", str(model), "--out", str(tmp_path / "o.h5ad")],
        "score": ["score", str(path), "--embedding-key", "X", "--label-key", "t", "--donor-key", "d", "--out", "s"],
    }[command]


@pytest.mark.parametrize("kind", ["missing", "csv", "directory", "corrupt"])
@pytest.mark.parametrize("command", ["train", "embed", "score"])
def test_bad_input_file_is_one_line(command, kind, tmp_path, capsys):
    path, reason = _bad_input(tmp_path, kind)
    assert main(_command(command, path, tmp_path)) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith(f"sctrilemma {command}: error: input file {path} {reason}")
    assert "expected an AnnData .h5ad file" in error
    assert not (tmp_path / "new_model").exists()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can read any file")
def test_unreadable_input_file(tmp_path, capsys):
    path = tmp_path / "locked.h5ad"
    path.write_bytes(HDF5_SIGNATURE)
    path.chmod(0)
    assert main(["train", str(path), "--out", str(tmp_path / "m")]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_embed_model_must_be_a_saved_model(small_adata, tmp_path, capsys):
    path = tmp_path / "data.h5ad"
    small_adata.write_h5ad(path)
    out = ["--out", str(tmp_path / "o.h5ad")]
    assert main(["embed", str(path), "--model", str(tmp_path / "none"), *out]) == 2
    assert "--model" in capsys.readouterr().err
    assert main(["embed", str(path), "--model", str(path), *out]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["embed", str(path), "--model", str(empty), *out]) == 2
    assert f"--model {empty} is not a saved sctrilemma model (no model.safetensors)" in capsys.readouterr().err
    (empty / "model.safetensors").write_bytes(b"not a safetensors file")
    assert main(["embed", str(path), "--model", str(empty), *out]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "is not a readable reference" in error
    assert not (tmp_path / "o.h5ad").exists()


def test_embed_out_checked_before_reading(tmp_path, capsys):
    path = tmp_path / "in.h5ad"
    path.write_bytes(HDF5_SIGNATURE)
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"")
    assert main(["embed", str(path), "--model", str(model), "--out", str(tmp_path / "no" / "o.h5ad")]) == 2
    assert "does not exist; create it first" in capsys.readouterr().err
    assert main(["embed", str(path), "--model", str(model), "--out", str(tmp_path)]) == 2
    assert "is a directory; pass a file name" in capsys.readouterr().err


def test_train_refuses_existing_model_before_training(tmp_path, capsys):
    path = tmp_path / "in.h5ad"
    path.write_bytes(HDF5_SIGNATURE)  # never read: --out is checked first
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "model.safetensors").write_bytes(b"")
    assert main(["train", str(path), "--out", str(saved)]) == 2
    assert f"--out {saved} already holds a saved model (model.safetensors); pass --overwrite" in capsys.readouterr().err
    assert main(["train", str(path), "--out", str(saved / "model.safetensors")]) == 2
    assert "is a file; pass a directory" in capsys.readouterr().err


def test_score_checks_gene_set_files_and_pairs(tmp_path, capsys):
    path = tmp_path / "in.h5ad"
    path.write_bytes(HDF5_SIGNATURE)
    base = ["score", str(path), "--embedding-key", "X", "--label-key", "t", "--donor-key", "d", "--out", "s"]
    assert main([*base, "--gene-sets", "hallmark"]) == 2
    assert "--gene-sets expects NAME=VALUE, got 'hallmark'" in capsys.readouterr().err
    assert main([*base, "--gene-sets", f"hallmark={tmp_path / 'h.gmt'}"]) == 2
    assert "does not exist; expected a gene-set library in GMT format" in capsys.readouterr().err
    (tmp_path / "out_file").write_text("")
    assert main([*base[:-1], str(tmp_path / "out_file")]) == 2
    assert "is a file; pass a directory for the outputs" in capsys.readouterr().err


def test_example_out_must_not_be_a_file(tmp_path, capsys):
    (tmp_path / "taken").write_text("")
    assert main(["example", "--out", str(tmp_path / "taken")]) == 2
    assert "is a file" in capsys.readouterr().err


@pytest.mark.slow
def test_example_main_job(tmp_path, capsys):
    assert main(["example", "--out", str(tmp_path), "--max-epochs", "1"]) == 0
    quality = capsys.readouterr().out.strip().splitlines()[-1]
    assert quality.startswith("k-means NMI ")
    nmi, ari = float(quality.split()[2].rstrip(",")), float(quality.split()[4])
    assert 0.0 < nmi <= 1.0
    assert -1.0 <= ari <= 1.0
    embedded = ad.read_h5ad(tmp_path / "example_embedded.h5ad")
    assert embedded.obsm["X_sctrilemma"].shape == (3000, 64)
    assert (tmp_path / "umap.png").stat().st_size > 10_000
    assert (tmp_path / "model" / "model.safetensors").exists()


def test_library_info_records_are_not_printed_by_default(tmp_path):
    """A library logger set to INFO (Lightning's seed message) propagates to the CLI's handler, which drops it."""
    script = (
        "import logging, sys\n"
        "from sctrilemma._cli import main\n"
        "code = main(sys.argv[1:])\n"
        "library = logging.getLogger('some_library')\n"
        "library.setLevel(logging.INFO)\n"
        "library.info('an informational line')\n"
        "library.warning('a warning line')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(sctrilemma.__file__).parents[1])}
    missing = str(tmp_path / "missing.h5ad")
    for flags, shown in (([], False), (["--verbose"], True)):
        result = subprocess.run(
            [sys.executable, "-c", script, *flags, "train", missing, "--out", str(tmp_path / "m")],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,  # a guard only: this takes about a second
            check=True,
        )
        assert ("an informational line" in result.stderr) == shown
        assert "WARNING a warning line" in result.stderr


def test_embed_labels_a_full_transcriptome_query_with_a_labelled_reference(tmp_path, capsys):
    """A reference with a label classifier: `embed` writes labels; extra genes are fine; --min-overlap is passed."""
    from sctrilemma import SCTrilemma
    from sctrilemma.data import example_reference_dir, load_example
    from sctrilemma.data._example import HELD_OUT_DONORS, REFERENCE_DONORS

    adata = load_example()
    reference = SCTrilemma.load_query_data(
        adata[adata.obs["donor"].isin(REFERENCE_DONORS)].copy(), example_reference_dir()
    )
    reference.fit_label_classifier("cell_type")
    reference.save(tmp_path / "labelled")
    query = adata[adata.obs["donor"].isin(HELD_OUT_DONORS)]
    extra = sp.random(query.n_obs, 3000, density=0.01, format="csr", random_state=0, dtype=np.float32)
    extra.data[:] = 1.0
    full = ad.AnnData(
        X=sp.hstack([sp.csr_matrix(query.X), extra], format="csr"),
        obs=query.obs.copy(),
        var=ad.AnnData(var=query.var).var.reindex(list(query.var_names) + [f"ENSG6{n:010d}" for n in range(3000)]),
    )
    path, out = tmp_path / "query.h5ad", tmp_path / "embedded.h5ad"
    full.write_h5ad(path)
    assert main(["embed", str(path), "--model", str(tmp_path / "labelled"), "--out", str(out)]) == 0
    embedded = ad.read_h5ad(out)
    assert "labels to .obs['sctrilemma_prediction']" in capsys.readouterr().out
    accuracy = (embedded.obs["sctrilemma_prediction"].astype(str) == query.obs["cell_type"].astype(str)).mean()
    assert accuracy > 0.95
    assert {"sctrilemma_probability", "sctrilemma_uncertainty", "sctrilemma_is_unknown"} <= set(embedded.obs)
    # the query holds every gene of the model, so even the strictest threshold accepts it; 0 is not a threshold
    assert (
        main(["embed", str(path), "--model", str(tmp_path / "labelled"), "--out", str(out), "--min-overlap", "1"]) == 0
    )
    with pytest.raises(SystemExit, match="2"):
        main(["embed", str(path), "--model", str(tmp_path / "labelled"), "--out", str(out), "--min-overlap", "0"])
    assert "expected a number in (0, 1]" in capsys.readouterr().err


def test_train_from_a_pretrained_reference(small_adata, tmp_path, capsys):
    from sctrilemma.data import example_reference_dir

    path = tmp_path / "data.h5ad"
    small_adata.write_h5ad(path)
    model_dir = tmp_path / "tuned"
    pretrained = ["--pretrained", "example"]
    argv = ["train", str(path), "--out", str(model_dir), "--donor-key", "donor", "--max-steps", "2", *pretrained]
    assert main(argv) == 0
    tuned = sctrilemma.SCTrilemma.load(model_dir)
    reference = sctrilemma.SCTrilemma.load(example_reference_dir())
    assert tuned.gene_names_.tolist() == reference.gene_names_.tolist()
    changed = [
        not np.array_equal(a.numpy(), b.numpy())
        for a, b in zip(tuned.module.state_dict().values(), reference.module.state_dict().values(), strict=True)
    ]
    assert any(changed)  # fine-tuned, not a copy
    assert main([*argv[:3], str(tmp_path / "other"), *argv[4:], "--preset", "small"]) == 2
    assert "--preset does not apply with --pretrained" in capsys.readouterr().err
    assert main(["train", str(path), "--out", str(tmp_path / "x"), "--pretrained", str(tmp_path / "none")]) == 2
    assert f"--pretrained {tmp_path / 'none'} does not exist" in capsys.readouterr().err


def test_shipped_references_by_name(tmp_path, monkeypatch):
    from sctrilemma.data import blood_reference_dir, example_reference_dir

    monkeypatch.chdir(tmp_path)
    assert check_model_dir("blood") == blood_reference_dir()
    assert check_model_dir("example", "--pretrained") == example_reference_dir()
    (tmp_path / "blood").mkdir()  # a local directory of that name wins, and is checked as any other
    with pytest.raises(Exception, match="--model blood is not a saved sctrilemma model"):
        check_model_dir("blood")
