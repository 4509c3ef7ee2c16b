"""scTrilemma: a gene-token Perceiver VAE for single-cell RNA-seq behind the scvi-tools API."""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version

from . import benchmark, data, io, metrics, module, nn, plotting, train
from .model import SCTrilemma

try:
    __version__ = version("sctrilemma")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without installation
    __version__ = "0.0.0"

logger = logging.getLogger("sctrilemma")

__all__ = ["SCTrilemma", "benchmark", "data", "io", "metrics", "module", "nn", "plotting", "train"]
