"""Sphinx configuration (scverse template style).

The build is warning-free with ``-W`` (``nitpicky``) both offline (CI, local) and on Read the Docs. Intersphinx
needs the network: it is used on Read the Docs (or with ``SCTRILEMMA_DOCS_ONLINE=1``), where references into the
packages below are resolved and checked. Offline, references into exactly those packages are ignored instead;
references into sctrilemma itself are always checked.
"""

from __future__ import annotations

import inspect
import os
import shutil
from datetime import datetime
from functools import cached_property
from importlib.metadata import metadata
from pathlib import Path

HERE = Path(__file__).parent

info = metadata("sctrilemma")
project = info["Name"]
author = "sctrilemma developers"
copyright = f"{datetime.now():%Y}, {author}"
version = info["Version"]
release = version

# Tutorials live in ../tutorials and are copied here at build time (committed executed; never run by the docs build).
_tutorials = HERE.parent / "tutorials"
if _tutorials.is_dir():
    (HERE / "tutorials").mkdir(exist_ok=True)
    for notebook in _tutorials.glob("*.ipynb"):
        shutil.copy2(notebook, HERE / "tutorials" / notebook.name)

extensions = [
    "myst_nb",
    "sphinx_copybutton",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinxcontrib.bibtex",
    "sphinx_autodoc_typehints",
    "sphinx.ext.mathjax",
]

autosummary_generate = True
autodoc_member_order = "groupwise"
default_role = "literal"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_include_init_with_doc = False
napoleon_use_rtype = False  # return types come from the signatures (sphinx-autodoc-typehints)
napoleon_use_param = True
myst_heading_anchors = 6
myst_enable_extensions = ["amsmath", "colon_fence", "deflist", "dollarmath", "html_image", "html_admonition"]
myst_url_schemes = ("http", "https", "mailto")
nb_output_stderr = "remove"
nb_execution_mode = "off"
nb_merge_streams = True
typehints_defaults = "braces"
bibtex_bibfiles = ["references.bib"]
bibtex_reference_style = "author_year"

source_suffix = {".rst": "restructuredtext", ".ipynb": "myst-nb", ".myst": "myst-nb", ".md": "myst-nb"}

_external_docs = {
    "python": "https://docs.python.org/3",
    "anndata": "https://anndata.readthedocs.io/en/stable/",
    "mudata": "https://mudata.readthedocs.io/en/stable/",
    "scanpy": "https://scanpy.readthedocs.io/en/stable/",
    "scvi": "https://docs.scvi-tools.org/en/stable/",
    "numpy": "https://numpy.org/doc/stable/",
    "pandas": "https://pandas.pydata.org/docs/",
    "scipy": "https://docs.scipy.org/doc/scipy/",
    "scib_metrics": "https://scib-metrics.readthedocs.io/en/stable/",
    "tiledbsoma": "https://tiledbsoma.readthedocs.io/en/stable/",
    "matplotlib": "https://matplotlib.org/stable/",
    "torch": "https://docs.pytorch.org/docs/stable/",
    "lightning": "https://lightning.ai/docs/pytorch/stable/",
}
ONLINE = bool(os.environ.get("READTHEDOCS")) or os.environ.get("SCTRILEMMA_DOCS_ONLINE") == "1"
intersphinx_mapping = {name: (url, None) for name, url in _external_docs.items()} if ONLINE else {}

# Private import paths of public external names, as type hints resolve them.
_public_names = {
    "anndata._core.anndata.AnnData": "anndata.AnnData",
    "mudata._core.mudata.MuData": "mudata.MuData",
    "lightning.pytorch.trainer.trainer.Trainer": "lightning.pytorch.Trainer",
    "torch.nn.modules.module.Module": "torch.nn.Module",
    "pandas.core.frame.DataFrame": "pandas.DataFrame",
    "scib_metrics.nearest_neighbors._dataclass.NeighborsResults": "scib_metrics.nearest_neighbors.NeighborsResults",
    "tiledbsoma._experiment.Experiment": "tiledbsoma.Experiment",
    "tiledbsoma_ml.dataset.ExperimentDataset": "tiledbsoma_ml.ExperimentDataset",
}


def typehints_formatter(annotation, config=None) -> str | None:
    """Link external classes by their public name (e.g. ``anndata.AnnData``, not its private module path)."""
    if not inspect.isclass(annotation):
        return None
    public = _public_names.get(f"{annotation.__module__}.{annotation.__qualname__}")
    return None if public is None else f":py:class:`~{public}`"


templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]

html_theme = "sphinx_book_theme"
html_title = project
html_theme_options = {"repository_url": "https://github.com/sctrilemma/sctrilemma", "use_repository_button": True}
pygments_style = "default"

suppress_warnings = ["config.cache"]  # typehints_formatter is a function: Sphinx cannot pickle it (harmless)

nitpicky = True
nitpick_ignore = [
    # The return type of sctrilemma.io.read_reference: a private named tuple described in that docstring.
    ("py:class", "sctrilemma.io._reference.Reference"),
    # Private return types of the SOMA data module and the streamed pseudo-bulk pass, described in their docstrings.
    ("py:class", "sctrilemma.data._soma_datamodule.SomaBatches"),
    ("py:class", "sctrilemma.data._census.PseudobulkTable"),
    # tiledbsoma-ml publishes no Sphinx inventory.
    ("py:class", "tiledbsoma_ml.ExperimentDataset"),
]
if not ONLINE:
    # Offline there are no inventories: references into the intersphinx packages (and the standard library
    # modules used in signatures) cannot be resolved here. Builtins such as ``str`` resolve without inventories.
    _stdlib = ["collections", "numbers", "os", "pathlib", "typing"]
    _external = "|".join([*(name for name in _external_docs if name != "python"), *_stdlib])
    nitpick_ignore_regex = [(r"py:.*", rf"({_external})(\..+)?")]


def _defining_module(member) -> str:
    """Module that defines a class member (a function, classmethod, property or cached property)."""
    if isinstance(member, property):
        member = member.fget
    elif isinstance(member, cached_property):
        member = member.func
    return getattr(inspect.unwrap(member), "__module__", None) or ""


def skip_foreign_members(app, what, name, obj, skip, options) -> bool | None:
    """List only class members that sctrilemma defines or overrides.

    Members inherited from scvi-tools, torch or Lightning are documented by those projects (the class pages link
    their base classes); their docstrings are not written for this site. Plain data attributes (dataclass fields,
    named-tuple fields) are documented in the class docstrings.
    """
    if skip or what not in {"method", "property", "attribute", "function"}:
        return None
    if not (inspect.isroutine(obj) or isinstance(obj, property | cached_property)):
        return True
    return None if _defining_module(obj).startswith("sctrilemma") else True


def returns_as_description(app, what, name, obj, options, lines: list[str]) -> None:
    """Read a ``Returns`` section of unindented lines as one description, not as a return type.

    Our docstrings give types only in signatures (house style), so ``Returns`` holds prose. numpydoc would take
    its first line for a type; an empty ``:`` entry makes napoleon render the lines as the description instead.
    """
    for start in range(len(lines) - 2):
        if lines[start].strip() != "Returns" or not lines[start + 1].strip().startswith("---"):
            continue
        end = start + 2
        while end < len(lines) and lines[end].strip() and not lines[end].startswith(" "):
            end += 1
        if end == start + 2 or (end < len(lines) and lines[end].startswith(" ")):
            continue  # empty, or numpydoc ``type`` + indented description: leave it to napoleon
        lines[start + 2 : end] = [":", *("    " + line for line in lines[start + 2 : end])]
        return


def setup(app) -> None:
    """Register the member filter and the Returns rewrite (before napoleon, which runs at priority 500)."""
    app.connect("autodoc-skip-member", skip_foreign_members)
    app.connect("autodoc-process-docstring", returns_as_description, priority=400)
