"""PB-Cond inputs: dataset-donor pseudo-bulk profiles and their soft codes against frozen k-means centroids."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scvi.utils import track

from sctrilemma._normalize import TARGET_SUM
from sctrilemma._validation import ROW_CHUNK

logger = logging.getLogger(__name__)


def pseudobulk_profiles(
    matrix, groups: np.ndarray, n_groups: int | None = None, *, progress_bar: bool = False
) -> np.ndarray:
    """Pseudo-bulk profiles ``p_b = log1p(mean_{c in b} 1e4 x_c / sum_g x_cg)`` (paper Eq. pseudo-bulk).

    One pass over row chunks of ``matrix`` (dense, sparse or backed); each chunk is normalised per
    cell and summed per group with one sparse matrix product.

    Parameters
    ----------
    matrix
        Raw counts, ``(n_cells, n_genes)``.
    groups
        Integer group of each cell, ``(n_cells,)``, in ``[0, n_groups)``.
    n_groups
        Number of groups; defaults to ``groups.max() + 1``.
    progress_bar
        Show progress over chunks.

    Returns
    -------
    Profiles, ``(n_groups, n_genes)``; a group without cells gets a row of zeros.
    """
    groups = np.asarray(groups, dtype=np.int64).ravel()
    if groups.shape[0] != matrix.shape[0]:
        raise ValueError(f"`groups` has {groups.shape[0]} entries for {matrix.shape[0]} cells.")
    n_groups = int(groups.max()) + 1 if n_groups is None else n_groups
    sums = np.zeros((n_groups, matrix.shape[1]), dtype=np.float64)
    starts = range(0, matrix.shape[0], ROW_CHUNK)
    for start in track(starts, description="Pseudo-bulk profiles", disable=not progress_bar, style="tqdm"):
        stop = min(start + ROW_CHUNK, matrix.shape[0])
        block = matrix[start:stop]
        block = sp.csr_matrix(block, dtype=np.float64) if sp.issparse(block) else np.asarray(block, dtype=np.float64)
        library = np.maximum(np.asarray(block.sum(axis=1)).ravel(), 1.0)
        indicator = sp.csr_matrix(
            (TARGET_SUM / library, (groups[start:stop], np.arange(stop - start))), shape=(n_groups, stop - start)
        )
        sums += np.asarray((indicator @ block).todense() if sp.issparse(block) else indicator @ block)
    sizes = np.bincount(groups, minlength=n_groups).astype(np.float64)
    return np.log1p(sums / np.maximum(sizes, 1.0)[:, None])


@dataclass(frozen=True)
class PseudobulkCodebook:
    """Frozen k-means centroids of reference pseudo-bulk profiles and the soft-assignment rule.

    ``t_b = softmax(-(d_b / sigma) / temperature)`` where ``d_b`` are Euclidean distances of a
    profile to the centroids and ``sigma`` is the standard deviation of the reference
    group-to-centroid distance matrix.

    Attributes
    ----------
    centroids
        ``(M, n_genes)``.
    sigma
        Distance scale.
    temperature
        Soft-assignment temperature ``T``.
    """

    centroids: np.ndarray
    sigma: float
    temperature: float = 1.0

    @property
    def n_codes(self) -> int:
        """Number of centroids ``M``."""
        return self.centroids.shape[0]

    def distances(self, profiles: np.ndarray) -> np.ndarray:
        """Euclidean distances ``(n_groups, M)`` of ``profiles`` ``(n_groups, n_genes)`` to the centroids."""
        profiles = np.asarray(profiles, dtype=np.float64)
        if profiles.shape[1] != self.centroids.shape[1]:
            raise ValueError(
                f"Profiles have {profiles.shape[1]} genes but the codebook has {self.centroids.shape[1]}; "
                "compute them over the model's genes."
            )
        squared = (
            (profiles**2).sum(1)[:, None] + (self.centroids**2).sum(1)[None, :] - 2.0 * profiles @ self.centroids.T
        )
        return np.sqrt(np.maximum(squared, 0.0))

    def codes(self, profiles: np.ndarray) -> np.ndarray:
        """Soft codes ``(n_groups, M)``, rows summing to one."""
        logits = -(self.distances(profiles) / self.sigma) / self.temperature
        logits -= logits.max(axis=1, keepdims=True)
        weights = np.exp(logits)
        return weights / weights.sum(axis=1, keepdims=True)

    @classmethod
    def fit(
        cls,
        profiles: np.ndarray,
        n_codes: int = 32,
        *,
        seed: int = 42,
        n_init: int = 5,
        temperature: float = 1.0,
    ) -> PseudobulkCodebook:
        """Fit ``n_codes`` k-means centroids to reference ``profiles`` ``(n_groups, n_genes)``.

        With fewer groups than ``n_codes``, ``M`` becomes the number of groups (logged at info level).
        """
        from sklearn.cluster import KMeans

        profiles = np.asarray(profiles, dtype=np.float64)
        n_groups = profiles.shape[0]
        if n_groups < 1:
            raise ValueError("Cannot fit a pseudo-bulk codebook without any group.")
        if n_groups < n_codes:
            # Expected with few donors (the example has 5), so not a warning: nothing for the user to change.
            logger.info(
                "Only %d dataset-donor groups for %d pseudo-bulk centroids; using M=%d, one centroid per group "
                "(expected with few donors).",
                n_groups,
                n_codes,
                n_groups,
            )
            n_codes = n_groups
        kmeans = KMeans(n_clusters=n_codes, n_init=n_init, random_state=seed).fit(profiles)
        centroids = kmeans.cluster_centers_
        provisional = cls(centroids=centroids, sigma=1.0, temperature=temperature)
        sigma = float(provisional.distances(profiles).std())
        # A single group (or identical groups) has no spread; any positive scale gives the same codes then.
        return cls(centroids=centroids, sigma=sigma if sigma > 0 else 1.0, temperature=temperature)

    def to_dict(self) -> dict:
        """Plain arrays and numbers, for saving with the model."""
        return {"centroids": np.asarray(self.centroids), "sigma": float(self.sigma), "temperature": self.temperature}

    @classmethod
    def from_dict(cls, state: dict) -> PseudobulkCodebook:
        """Inverse of :meth:`~sctrilemma.data.PseudobulkCodebook.to_dict`."""
        return cls(np.asarray(state["centroids"]), float(state["sigma"]), float(state["temperature"]))
