"""The API reference lists every public name, and the docs point at files that exist."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import sctrilemma

DOCS = Path(__file__).parents[1] / "docs"


def _public_names() -> set[str]:
    """``sctrilemma.<sub>.<name>`` for every name in each subpackage's ``__all__`` (public functions without one)."""
    names = {f"{name}" for name in sctrilemma.__all__ if not inspect.ismodule(getattr(sctrilemma, name))}
    for name in sctrilemma.__all__:
        module = getattr(sctrilemma, name)
        if not inspect.ismodule(module) or name == "model":
            continue
        exported = getattr(module, "__all__", None)
        if exported is None:
            exported = [
                attr
                for attr, value in vars(module).items()
                if not attr.startswith("_") and inspect.isfunction(value) and value.__module__ == module.__name__
            ]
        names |= {f"{name}.{attr}" for attr in exported}
    # sctrilemma.model's class is documented at the top level, its functions under the subpackage
    names |= {f"model.{attr}" for attr in importlib.import_module("sctrilemma.model").__all__ if attr != "SCTrilemma"}
    return names


def _autosummary_entries(text: str) -> set[str]:
    """Names listed under ``.. autosummary::`` directives (indented lines that are not options)."""
    entries = set()
    for block in re.findall(r"\.\. autosummary::\n((?:[ \t]+.*\n|\n)+)", text):
        for line in block.splitlines():
            line = line.strip()
            if line and not line.startswith(":"):
                entries.add(line.lstrip("~"))
    return entries


def test_api_reference_covers_every_public_name() -> None:
    listed = _autosummary_entries((DOCS / "api.md").read_text())
    public = _public_names()
    assert public - listed == set(), "add these to docs/api.md"
    assert listed - public == set(), "docs/api.md lists names that are not public"


def test_model_exports_match_top_level() -> None:
    assert set(importlib.import_module("sctrilemma.model").__all__) == {"LabelClassifier", "PRESETS", "SCTrilemma"}
    assert "SCTrilemma" in _public_names()


def test_toctree_documents_exist() -> None:
    index = (DOCS / "index.md").read_text()
    toctree = re.search(r"```\{toctree\}\n(.*?)```", index, flags=re.S).group(1)
    pages = [line.strip() for line in toctree.splitlines() if line.strip() and not line.startswith(":")]
    missing = [page for page in pages if not (DOCS / f"{page}.md").exists()]
    assert pages
    assert not missing, f"index.md's toctree names missing pages: {missing}"
