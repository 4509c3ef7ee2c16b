"""Latent-mode minification (scvi-tools' ``minify_adata``) with the posteriors of the latent tokens."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
from scvi import REGISTRY_KEYS, settings
from scvi.data._constants import _ADATA_MINIFY_TYPE_UNS_KEY, _FIELD_REGISTRIES_KEY, _SCVI_UUID_KEY, ADATA_MINIFY_TYPE
from scvi.data._utils import _get_adata_minify_type
from scvi.model.base import BaseModelClass
from scvi.model.utils import get_minified_adata_scrna

if TYPE_CHECKING:
    from anndata import AnnData
    from mudata import MuData
    from scvi._types import MinifiedDataType
    from scvi.data import AnnDataManager
    from scvi.data.fields import BaseAnnDataField


class MinifyMixin:
    """scvi-tools' minified data for SCTrilemma (place before :class:`~scvi.model.base.BaseMinifiedModeModelClass`).

    scVI caches the posterior of its single latent ``z``. SCTrilemma's decoder reads the ``K`` latent tokens, which
    the pooled posterior of ``get_latent_representation(return_dist=True)`` cannot give back, so the minified data
    caches the token posteriors of :meth:`get_latent_tokens` (``return_dist=True``), flattened to
    ``(n_obs, K * n_hidden)``, and each cell's observed total.
    """

    _LATENT_QZM_KEY = "sctrilemma_latent_qzm"
    _LATENT_QZV_KEY = "sctrilemma_latent_qzv"
    # each cell's pseudo-bulk code, for an embedding centred on the prior (data without counts cannot give it)
    _PSEUDOBULK_CODES_KEY = "sctrilemma_pseudobulk_codes"

    def _set_adata(self, adata: AnnData | MuData) -> None:
        BaseModelClass.adata.fset(self, adata)
        self.module.minified_data_type = self.minified_data_type

    adata = property(BaseModelClass.adata.fget, _set_adata, doc="Data attached to the model.")

    def minify_adata(
        self,
        minified_data_type: MinifiedDataType = ADATA_MINIFY_TYPE.LATENT_POSTERIOR,
        use_latent_qzm_key: str = "X_latent_qzm",
        use_latent_qzv_key: str = "X_latent_qzv",
    ) -> None:
        """Replace the model's AnnData by a minified copy (scvi-tools' ``minify_adata``, with the token posteriors).

        The copy keeps ``obs``, ``var``, ``obsm`` and ``uns`` and caches, per cell, the posterior means and variances
        of the ``K`` latent tokens and the observed total (``obs["observed_lib_size"]``). With
        ``"latent_posterior_parameters"`` its counts are all-zero sparse matrices; with
        ``"latent_posterior_parameters_with_counts"`` they are kept. Latent representations, expression,
        likelihood parameters and predictive samples then come from the cache; the ELBO, reconstruction error,
        marginal likelihood and PB-Cond codes need counts, and training is refused on any minified data (the
        encoder would change under the cache). The user's AnnData is not modified. Cells without counts get a
        cached total of 0, with a warning.

        Parameters
        ----------
        minified_data_type
            ``"latent_posterior_parameters"`` or ``"latent_posterior_parameters_with_counts"``.
        use_latent_qzm_key, use_latent_qzv_key
            ``adata.obsm`` keys of the token posterior means and variances, ``(n_obs, K, n_hidden)`` or
            ``(n_obs, K * n_hidden)``, as from ``model.get_latent_tokens(return_dist=True)``. When both are absent,
            they are computed.

        Raises
        ------
        ValueError
            For the pooled posterior, arrays of another shape, one key of two, non-positive variances, minified data.
        NotImplementedError
            For another ``minified_data_type``.

        Examples
        --------
        >>> qzm, qzv = model.get_latent_tokens(return_dist=True)
        >>> adata.obsm["X_latent_qzm"], adata.obsm["X_latent_qzv"] = qzm, qzv
        >>> model.minify_adata()  # without the two keys, minify_adata computes them
        """
        if minified_data_type not in ADATA_MINIFY_TYPE:
            raise NotImplementedError(f"Minification method {minified_data_type} is not supported.")
        if self.adata is None or hasattr(self.adata, "mod"):
            raise ValueError(
                "`minify_adata` needs the model's AnnData; MuData and models without data are not supported."
            )
        if self.minified_data_type is not None:
            raise ValueError(
                f"The model's AnnData is already minified ({self.minified_data_type!r}). To minify again, attach the "
                "full data first (`model.adata = adata_with_counts`)."
            )
        qzm, qzv = self._token_posteriors(use_latent_qzm_key, use_latent_qzv_key)
        library = np.asarray(self.adata_manager.get_from_registry(REGISTRY_KEYS.X_KEY).sum(axis=-1)).ravel()
        if (library == 0).any():
            warnings.warn(
                f"{int((library == 0).sum())} of {library.size} cells have no counts in the model's data, so their "
                "cached observed library is 0: their expected counts (likelihood means, `library_size='latent'`) "
                "are 0; proportions are unaffected. Minify the data that holds the counts.",
                UserWarning,
                stacklevel=settings.warnings_stacklevel,
            )
        minified = get_minified_adata_scrna(
            self.adata_manager, keep_count_data=minified_data_type == ADATA_MINIFY_TYPE.LATENT_POSTERIOR_WITH_COUNTS
        )
        del minified.uns[_SCVI_UUID_KEY]
        minified.uns[_ADATA_MINIFY_TYPE_UNS_KEY] = minified_data_type
        minified.obsm[self._LATENT_QZM_KEY] = qzm
        minified.obsm[self._LATENT_QZV_KEY] = qzv
        minified.obs[self._OBSERVED_LIB_SIZE_KEY] = library
        if self._centres_embedding():
            minified.obsm[self._PSEUDOBULK_CODES_KEY] = self._cell_codes(self.adata)
        self._update_adata_and_manager_post_minification(minified, minified_data_type)

    def _token_posteriors(self, qzm_key: str, qzv_key: str) -> tuple[np.ndarray, np.ndarray]:
        """Token posterior means and variances ``(n_obs, K * n_hidden)`` from ``adata.obsm``, or computed."""
        obsm = self.adata.obsm
        present = [key for key in (qzm_key, qzv_key) if key in obsm]
        if not present:
            arrays = self.get_latent_tokens(return_dist=True)
        elif len(present) == 1:
            missing = qzv_key if present[0] == qzm_key else qzm_key
            raise ValueError(
                f"`adata.obsm` has {present[0]!r} but not {missing!r}: store both the token posterior means and "
                "variances (`model.get_latent_tokens(return_dist=True)`), or neither to have them computed."
            )
        else:
            arrays = (np.asarray(obsm[qzm_key]), np.asarray(obsm[qzv_key]))
        n_tokens, width = self.module.n_latent_tokens, self.module.n_hidden
        flat = []
        for key, array in zip((qzm_key, qzv_key), arrays, strict=True):
            if array.shape[1:] == (width,) and n_tokens > 1:
                raise ValueError(
                    f"`adata.obsm[{key!r}]` has {width} columns: the pooled posterior of "
                    "`get_latent_representation(return_dist=True)`, which cannot drive the decoder. Store the "
                    f"posteriors of the {n_tokens} latent tokens under these keys, "
                    "`qzm, qzv = model.get_latent_tokens(return_dist=True)`, or call `minify_adata()` without them "
                    "to have them computed."
                )
            if array.shape[1:] not in ((n_tokens, width), (n_tokens * width,)):
                raise ValueError(
                    f"`adata.obsm[{key!r}]` has shape {array.shape}; the token posterior is (n_obs, {n_tokens}, "
                    f"{width}) or flattened (n_obs, {n_tokens * width}), as from "
                    "`model.get_latent_tokens(return_dist=True)`."
                )
            flat.append(array.reshape(array.shape[0], n_tokens * width).astype(np.float32))
        if not np.isfinite(flat[0]).all() or not (flat[1] > 0).all() or not np.isfinite(flat[1]).all():
            raise ValueError(
                f"`adata.obsm[{qzm_key!r}]` must be finite and `adata.obsm[{qzv_key!r}]` positive, finite variances "
                "(not log-variances or standard deviations), as from `model.get_latent_tokens(return_dist=True)`."
            )
        return flat[0], flat[1]

    @classmethod
    def _minified_fields(cls, adata: AnnData, source_registry: dict | None) -> list[BaseAnnDataField]:
        """The cache fields of minified ``adata`` for ``setup_anndata`` (scVI's rule).

        None when transferring from a registry without them: that is :meth:`minify_adata` registering its copy,
        which adds the fields itself.
        """
        minified_data_type = _get_adata_minify_type(adata)
        if minified_data_type is None:
            return []
        if source_registry is not None and REGISTRY_KEYS.MINIFY_TYPE_KEY not in source_registry[_FIELD_REGISTRIES_KEY]:
            return []
        return cls._get_fields_for_adata_minification(minified_data_type)

    def _refuse_training_if_minified(self) -> None:
        if self.minified_data_type is not None:
            raise ValueError(
                f"The {type(self).__name__}.train function currently does not support minified data. Training "
                "would change the encoder and leave the cached token posteriors stale: attach the full data "
                "(`model.adata = adata_with_counts`), train, then minify again."
            )


def check_minified_load(registry: dict, adata: AnnData | MuData) -> None:
    """Refuse minified data for a saved model that was not minified (scvi-tools' ``load`` rule)."""
    saved_minified = REGISTRY_KEYS.MINIFY_TYPE_KEY in registry[_FIELD_REGISTRIES_KEY]
    if _get_adata_minify_type(adata) is not None and not saved_minified:
        kind = "mudata" if hasattr(adata, "mod") else "adata"
        raise ValueError(f"It appears you are trying to load a non-minified model with minified {kind}")


def is_minified_without_counts(adata: AnnData | MuData) -> bool:
    """Whether ``adata`` was minified with ``minified_data_type="latent_posterior_parameters"`` (no counts)."""
    return _get_adata_minify_type(adata) == ADATA_MINIFY_TYPE.LATENT_POSTERIOR


def holds_counts(manager: AnnDataManager) -> bool:
    """Whether ``manager``'s data has counts (it is not minified without them)."""
    if REGISTRY_KEYS.MINIFY_TYPE_KEY not in manager.data_registry:
        return True
    return manager.get_from_registry(REGISTRY_KEYS.MINIFY_TYPE_KEY) != ADATA_MINIFY_TYPE.LATENT_POSTERIOR
