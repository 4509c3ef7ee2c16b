"""Boundary checks shared by the metric functions, and the error raised when a metric cannot be computed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


class MetricSkipped(ValueError):
    """A metric is undefined for the given input (one label class, one donor, no eligible stratum).

    Subclasses :class:`ValueError`, so callers that do not care can treat it as bad input; a scorecard can catch
    it specifically and record the metric as missing for that dataset.
    """


def skip(metric: str, why: str) -> MetricSkipped:
    """Build the error for an undefined metric; messages read ``"<metric> cannot be computed: <why>"``."""
    return MetricSkipped(f"{metric} cannot be computed: {why}")


def check_embedding(X: ArrayLike, *, name: str = "X", min_obs: int = 2) -> np.ndarray:
    """Return ``X`` as a finite float64 array of shape ``(n_obs, n_features)`` or raise a ``ValueError``."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"`{name}` must be 2-D (n_obs, n_features); got an array of shape {X.shape}.")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"`{name}` must be numeric; got dtype {X.dtype}.")
    X = X.astype(np.float64, copy=False)
    if X.shape[0] < min_obs or X.shape[1] == 0:
        raise ValueError(f"`{name}` has shape {X.shape}; at least {min_obs} observations and 1 feature are needed.")
    if not np.isfinite(X).all():
        n_bad = int((~np.isfinite(X)).any(axis=1).sum())
        raise ValueError(f"`{name}` contains NaN or infinite values in {n_bad} rows; remove or impute those rows.")
    return X


def check_labels(labels: ArrayLike, n_obs: int, *, name: str) -> np.ndarray:
    """Return ``labels`` as a 1-D array of length ``n_obs`` without missing values, or raise a ``ValueError``."""
    values = np.asarray(labels)
    if values.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D (n_obs,); got an array of shape {values.shape}.")
    if values.shape[0] != n_obs:
        raise ValueError(f"`{name}` has {values.shape[0]} entries but the embedding has {n_obs} rows; they must match.")
    n_missing = int(pd.isna(values).sum())
    if n_missing:
        raise ValueError(f"`{name}` has {n_missing} missing values (NaN/None); drop those cells or fill the labels.")
    return values


def require_classes(values: np.ndarray, *, metric: str, name: str, what: str, minimum: int = 2) -> np.ndarray:
    """Return the unique values, raising :class:`~sctrilemma.metrics.MetricSkipped` when fewer than ``minimum`` are present."""
    uniques = np.unique(values)
    if uniques.size < minimum:
        seen = f"only {uniques[0]!r}" if uniques.size else "none"
        raise skip(metric, f"`{name}` has {uniques.size} distinct {what} ({seen}); at least {minimum} are needed.")
    return uniques


def l2_normalize(X: np.ndarray, *, name: str = "X") -> np.ndarray:
    """Scale each row to unit L2 norm; rows of zeros have no direction and raise a ``ValueError``."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(
            f"`{name}` has {int((norms == 0).sum())} all-zero rows; cosine geometry is undefined for them."
        )
    return X / norms
