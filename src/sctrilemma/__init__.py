"""scTrilemma: a gene-token Perceiver VAE for single-cell RNA-seq behind the scvi-tools API.

Subpackages and :class:`SCTrilemma` load on first access, so that ``import sctrilemma`` (and the
``sctrilemma`` command's ``--help``) does not pay for importing torch and scvi-tools.
"""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import benchmark, data, io, metrics, model, module, nn, plotting, train
    from .model import SCTrilemma

try:
    __version__ = version("sctrilemma")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without installation
    __version__ = "0.0.0"

logger = logging.getLogger("sctrilemma")

_SUBMODULES = frozenset({"benchmark", "data", "io", "metrics", "model", "module", "nn", "plotting", "train"})

__all__ = ["SCTrilemma", "benchmark", "data", "io", "metrics", "module", "nn", "plotting", "train"]


def __getattr__(name: str) -> Any:
    """Import a subpackage (or :class:`SCTrilemma`) the first time it is used."""
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name == "SCTrilemma":
        model_class = importlib.import_module(".model", __name__).SCTrilemma
        globals()[name] = model_class
        return model_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "model"})
