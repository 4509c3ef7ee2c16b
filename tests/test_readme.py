"""The README's zero-shot code runs as written, in Python and on the command line, on a full-transcriptome query."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import anndata as ad

from sctrilemma._cli import main
from sctrilemma.data import load_pbmc_v3

README = Path(__file__).parents[1] / "README.md"


def _blocks(language: str, section: str) -> list[str]:
    """The ``language`` code blocks of the README's ``section`` (a level-2 heading)."""
    text = README.read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", body, flags=re.S)


def test_reference_python_block_runs_as_written() -> None:
    (code,) = _blocks("python", "The pretrained blood reference")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    query, labels = namespace["query"], namespace["labels"]
    assert query.n_vars > 19_000  # a full transcriptome, accepted as it is
    assert query.obsm["X_sctrilemma"].shape[0] == query.n_obs
    assert labels.index.equals(query.obs_names)
    assert {"prediction", "probability", "uncertainty", "is_unknown"} <= set(labels.columns)
    assert labels["is_unknown"].mean() < 0.5  # another chemistry is not unknown as a whole


def test_embed_command_runs_as_written(tmp_path: Path, monkeypatch) -> None:
    (commands,) = _blocks("bash", "Command line")
    line = next(line for line in commands.splitlines() if line.startswith("sctrilemma embed"))
    argv = shlex.split(line.split("#")[0])[1:]
    monkeypatch.chdir(tmp_path)
    load_pbmc_v3().write_h5ad(tmp_path / argv[1])  # the README's input name, holding a full-transcriptome query
    assert main(argv) == 0
    embedded = ad.read_h5ad(tmp_path / argv[argv.index("--out") + 1])
    assert "X_sctrilemma" in embedded.obsm
    assert embedded.obs["sctrilemma_prediction"].notna().all()
