"""Sphinx configuration (scverse template style)."""

from __future__ import annotations

import shutil
import sys
from datetime import datetime
from importlib.metadata import metadata
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "extensions"))

info = metadata("sctrilemma")
project = info["Name"]
author = "sctrilemma developers"
copyright = f"{datetime.now():%Y}, {author}"
version = info["Version"]
release = version

# Tutorials live in ../tutorials and are copied here at build time (never executed on the docs host).
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
napoleon_use_rtype = True
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

intersphinx_mapping = {
    "python": ("https://docs.python.org/3", None),
    "anndata": ("https://anndata.readthedocs.io/en/stable/", None),
    "mudata": ("https://mudata.readthedocs.io/en/stable/", None),
    "scanpy": ("https://scanpy.readthedocs.io/en/stable/", None),
    "scvi": ("https://docs.scvi-tools.org/en/stable/", None),
    "numpy": ("https://numpy.org/doc/stable/", None),
    "pandas": ("https://pandas.pydata.org/docs/", None),
    "torch": ("https://docs.pytorch.org/docs/stable/", None),
    "lightning": ("https://lightning.ai/docs/pytorch/stable/", None),
}

templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]

html_theme = "sphinx_book_theme"
html_static_path = ["_static"]
html_title = project
html_theme_options = {"repository_url": "https://github.com/sctrilemma/sctrilemma", "use_repository_button": True}
pygments_style = "default"

nitpicky = True
nitpick_ignore = [
    ("py:class", "torch.nn.modules.module.Module"),
]
