"""What the model fits from its data: PB-Cond's groups and codes, the module's start, and the embedding's centres.

Before training the module takes from its data the pseudo-bulk codes of its dataset-donor groups, the genes each
dataset measured, its gene embeddings (principal loadings), the encoder's genes (the most variable) and the depth
cells are embedded at; after training each dataset's centre is fixed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch
from scvi import REGISTRY_KEYS, settings

from sctrilemma._constants import SCT_MODULE_KEYS, SCT_REGISTRY_KEYS
from sctrilemma._normalize import fit_log1p_cp10k_pca, log1p_cp10k
from sctrilemma.data._pseudobulk import PseudobulkCodebook, pseudobulk_profiles
from sctrilemma.model._minify_mixin import holds_counts
from sctrilemma.model._utils import depth_and_expressed_genes_per_cell, measured_genes_per_dataset
from sctrilemma.module._prior import gaussian_kl
from sctrilemma.train._threads import torch_threads_kept

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

    from anndata import AnnData
    from scvi.data import AnnDataManager

logger = logging.getLogger(__name__)

SHUFFLE_SEED = 42

# Cells the principal components and the most variable genes are computed from: a start needs no more, and on 28k
# genes ARPACK took 5 s for 1,021 cells and 99 s for 20,420 on one thread.
MAX_PCA_CELLS = 5_000


def _cell_subset(counts, max_cells: int, seed: int):
    """``counts`` of a random subset of ``max_cells`` cells, in their order, drawn with ``seed``; all when fewer."""
    n_cells = counts.shape[0]
    if n_cells <= max_cells:
        return counts
    return counts[np.sort(np.random.default_rng(seed).choice(n_cells, max_cells, replace=False))]


def principal_gene_loadings(counts, n_components: int, *, max_cells: int = MAX_PCA_CELLS, seed: int = 0) -> np.ndarray:
    """Each gene's loadings on the top principal components of log1p(CP10K), ``(n_genes, k)``.

    Parameters
    ----------
    counts
        Raw counts ``(n_cells, n_genes)``, dense or sparse.
    n_components
        Components wanted; at most ``min(n_cells, n_genes) - 1`` are returned.
    max_cells
        A random subset of this many cells is used when there are more.
    seed
        Seed of the cell subset and of ARPACK's start vector.

    Returns
    -------
    Loadings with each component scaled to a mean square of one over the genes, the scale of ``N(0, 1)``.
    """
    n_genes = counts.shape[1]
    counts = _cell_subset(counts, max_cells, seed)
    n_components = min(n_components, min(counts.shape) - 1)
    if n_components < 1:
        return np.zeros((n_genes, 0), dtype=np.float32)
    pca, _ = fit_log1p_cp10k_pca(counts, n_components, seed=seed)
    return (pca.components_.T * np.sqrt(n_genes)).astype(np.float32)


def most_variable_genes(counts, n_genes: int, *, max_cells: int = MAX_PCA_CELLS, seed: int = 0) -> np.ndarray:
    """The ``n_genes`` most variable genes of log1p(CP10K), as a boolean mask ``(n_genes_total,)``.

    scanpy's :func:`~scanpy.pp.highly_variable_genes` (Seurat flavour, the one scanpy uses by default), on a random
    subset of ``max_cells`` cells when there are more. PyTorch's thread count is kept as it was.
    """
    import scanpy as sc
    from anndata import AnnData

    genes = AnnData(log1p_cp10k(_cell_subset(counts, max_cells, seed)))
    with torch_threads_kept():
        sc.pp.highly_variable_genes(genes, n_top_genes=n_genes, flavor="seurat")
    return genes.var["highly_variable"].to_numpy(dtype=bool)


class DataSetupMixin:
    """What the model fits from its data before training, and PB-Cond's codes for any registered data."""

    def _prepare_training(self) -> np.ndarray:
        """Fit what the module takes from its data before training; each cell's number of expressed genes.

        Refuses cells without counts, then sets PB-Cond's codes, the genes each dataset measured and, on an untrained
        model, the module's start from the data (:meth:`_initialize_module`).
        """
        self.module.train()  # Lightning does not switch modules back to training mode after load or a previous fit.
        depth, n_expressed = depth_and_expressed_genes_per_cell(self.adata_manager)
        self._prepare_prior(self.adata)
        self.module.measured_genes = measured_genes_per_dataset(self.adata_manager)
        if not self.is_trained_:
            self._initialize_module(depth)
        return n_expressed

    def _initialize_module(self, depth: np.ndarray) -> None:
        """Fit what an untrained model's module takes from its data: gene embeddings, encoder genes and depth.

        Called by ``train`` on in-memory data with counts (minified data is refused before, and a model streamed from
        the Census trains elsewhere), with each cell's total counts ``depth``. The gene embeddings start from the
        data's principal loadings when ``module.gene_embedding_init == "pca"`` (columns beyond the number of
        components keep their ``N(0, 1)`` start), the encoder reads the ``module.encoder_genes`` most variable genes
        when the data have more, and :meth:`~sctrilemma.module.SCTrilemmaModule.fit_embedding_depth` sets the depth
        cells are embedded at.
        """
        module = self.module
        module.fit_embedding_depth(depth)
        counts = self.adata_manager.get_from_registry(REGISTRY_KEYS.X_KEY)
        seed = settings.seed or 0
        if module.encoder_genes != "all" and module.n_input > module.encoder_genes:
            mask = most_variable_genes(counts, module.encoder_genes, seed=seed)
            module.encoder_gene_mask.copy_(torch.from_numpy(mask))
            logger.info("The encoder reads the %d most variable of the %d genes.", int(mask.sum()), module.n_input)
        if module.gene_embedding_init != "pca":
            return
        weight = module.gene_embedding.weight
        loadings = principal_gene_loadings(counts, weight.shape[1], seed=seed)
        with torch.no_grad():
            weight[:, : loadings.shape[1]] = torch.from_numpy(loadings).to(weight.device, weight.dtype)
        logger.info("Gene embeddings start from %d principal components of the data.", loadings.shape[1])

    def _groups(self, manager: AnnDataManager) -> tuple[np.ndarray, np.ndarray, int, pd.MultiIndex]:
        """Group of each cell, sorted group keys, key stride and ``(dataset, donor)`` names of the groups."""
        dataset = np.asarray(manager.get_from_registry(SCT_REGISTRY_KEYS.DATASET_KEY)).ravel().astype(np.int64)
        donor = np.asarray(manager.get_from_registry(SCT_REGISTRY_KEYS.DONOR_KEY)).ravel().astype(np.int64)
        donor_names = manager.get_state_registry(SCT_REGISTRY_KEYS.DONOR_KEY).categorical_mapping
        dataset_names = manager.get_state_registry(SCT_REGISTRY_KEYS.DATASET_KEY).categorical_mapping
        stride = len(donor_names)
        keys, group = np.unique(dataset * stride + donor, return_inverse=True)
        names = pd.MultiIndex.from_arrays(
            [np.asarray(dataset_names)[keys // stride], np.asarray(donor_names)[keys % stride]],
            names=["dataset", "donor"],
        )
        return group.ravel(), keys, stride, names

    def _group_profiles(self, manager: AnnDataManager) -> tuple[np.ndarray, np.ndarray, int, pd.MultiIndex]:
        """Pseudo-bulk profiles of the groups of ``manager``'s data (cached per registration)."""
        cache = self.__dict__.setdefault("_profile_cache", {})
        if not holds_counts(manager):
            raise ValueError(
                "PB-Cond's pseudo-bulk codes need counts, which data minified with "
                "`minified_data_type='latent_posterior_parameters'` does not have; use the full data."
            )
        if manager.id not in cache:
            group, keys, stride, names = self._groups(manager)
            if keys.size == group.size and group.size > 1:
                raise ValueError(
                    "Every cell forms its own dataset-donor group, so `donor_key` looks like a cell-level column. "
                    "Pass the column that names donors (or individuals/samples) to `setup_anndata(donor_key=...)`."
                )
            matrix = manager.get_from_registry(REGISTRY_KEYS.X_KEY)
            profiles = pseudobulk_profiles(matrix, group, keys.size, progress_bar=keys.size > 100)
            cache[manager.id] = (profiles, keys, stride, names)
        return cache[manager.id]

    @property
    def pseudobulk_codebook(self) -> PseudobulkCodebook | None:
        """The frozen PB-Cond codebook (``None`` before training or with ``prior="normal"``)."""
        state = self.pseudobulk_codebook_
        return None if state is None else PseudobulkCodebook.from_dict(state)

    def _codes(self, manager: AnnDataManager) -> tuple[np.ndarray, np.ndarray, int, pd.MultiIndex]:
        """Soft codes ``(n_groups, M)`` of ``manager``'s groups, fitting the codebook on first use."""
        profiles, keys, stride, names = self._group_profiles(manager)
        return self._codes_of_profiles(profiles), keys, stride, names

    def _codes_of_profiles(self, profiles: np.ndarray) -> np.ndarray:
        """Soft codes ``(n_groups, M)`` of pseudo-bulk ``profiles``; the first call fits the frozen codebook."""
        if self.pseudobulk_codebook_ is None:
            codebook = PseudobulkCodebook.fit(profiles, self.module.prior.to_mean.in_features)
            self.pseudobulk_codebook_ = codebook.to_dict()
            logger.info("Fitted the PB-Cond codebook: %d centroids on %d groups.", codebook.n_codes, len(profiles))
        codes = self.pseudobulk_codebook.codes(profiles)
        if self.prior_ == "shuffled":
            codes = codes[np.random.default_rng(SHUFFLE_SEED).permutation(codes.shape[0])]
        return codes

    def _set_module_codes(self, codes: np.ndarray, keys: np.ndarray, stride: int, n_cells: np.ndarray) -> None:
        width = self.module.prior.to_mean.in_features
        # With fewer groups than M the codebook has fewer centroids; pad the code with zeros.
        padded = np.zeros((codes.shape[0], width), dtype=np.float32)
        padded[:, : codes.shape[1]] = codes
        self.module.prior.set_group_codes(
            torch.as_tensor(keys), torch.as_tensor(padded), stride, torch.as_tensor(n_cells, dtype=torch.float32)
        )

    def _prepare_prior(self, adata: AnnData | None) -> None:
        """Give the module the codes of ``adata``'s groups (no-op for the standard-normal prior)."""
        if self.module.prior is None:
            return
        manager = self.get_anndata_manager(self._validate_anndata(adata), required=True)
        counts = holds_counts(manager)
        if not counts and self._PSEUDOBULK_CODES_KEY not in manager.adata.obsm:
            # other minified data: the callers that need codes (ELBO, reconstruction, marginal LL, training) refuse it
            return
        group, keys, stride, _ = self._groups(manager)
        if counts:
            codes = self._codes(manager)[0]
        else:  # cached by minify_adata for the embedding
            codes = np.asarray(manager.adata.obsm[self._PSEUDOBULK_CODES_KEY])[np.unique(group, return_index=True)[1]]
        self._set_module_codes(codes, keys, stride, np.bincount(group, minlength=len(keys)))

    def _cell_codes(self, adata: AnnData | None) -> np.ndarray:
        """Each cell's pseudo-bulk code ``(n_obs, M)``, that of its dataset-donor group."""
        self._prepare_prior(adata)
        manager = self.get_anndata_manager(self._validate_anndata(adata), required=True)
        keys = (SCT_REGISTRY_KEYS.DATASET_KEY, SCT_REGISTRY_KEYS.DONOR_KEY)
        tensors = {key: torch.as_tensor(np.asarray(manager.get_from_registry(key)).ravel()) for key in keys}
        return self.module.prior.group_codes_for(tensors).cpu().numpy()

    # Per dataset name, what its cells' embedding is reported relative to; fixed when the model is trained and, for a
    # query's datasets, when it is mapped (saved with the model).
    embedding_centres_: dict[str, list[float]] | None = None

    def _centres_embedding(self) -> bool:
        """Whether the embedding is reported relative to the PB-Cond prior mean of each cell's dataset."""
        return self.module.embedding_centred_on_prior and self.module.prior is not None

    def _embedding_shifts(self) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
        """A map from a batch's ``tensors`` to what its cells' embeddings are reported relative to, ``(batch, d)``.

        The mean PB-Cond prior mean of each cell's dataset, over the groups of the codes set last (fp32).
        """
        prior = self.module.prior
        with torch.no_grad():
            dataset_means = prior.dataset_means().float()
        return lambda tensors: dataset_means[prior.group_rows_for(tensors)]

    def _fix_embedding_centres(self, adata: AnnData | None, keep: bool) -> None:
        """Record each dataset's centre, the mean prior mean of its cells in ``adata``, as the embedding's origin.

        ``keep`` keeps the centres already recorded (a query mapped onto a reference adds its own datasets);
        otherwise (training) they are recorded anew.
        """
        if not self._centres_embedding():
            return
        self._prepare_prior(adata)
        manager = self.get_anndata_manager(self._validate_anndata(adata), required=True)
        names = manager.get_state_registry(SCT_REGISTRY_KEYS.DATASET_KEY).categorical_mapping
        prior = self.module.prior
        with torch.no_grad():
            means = prior.dataset_means().float().cpu().numpy()
        datasets = (prior.group_keys // prior.group_key_stride).cpu().numpy()
        centres = dict(self.embedding_centres_ or {}) if keep else {}
        for code, row in zip(*np.unique(datasets, return_index=True), strict=True):
            centres.setdefault(str(names[code]), [float(v) for v in means[row]])
        self.embedding_centres_ = centres

    def _recorded_centres(self, manager: AnnDataManager) -> np.ndarray | None:
        """The recorded centres ``(n_datasets, d)`` of ``manager``'s dataset categories, or ``None`` if one lacks."""
        names = manager.get_state_registry(SCT_REGISTRY_KEYS.DATASET_KEY).categorical_mapping
        recorded = self.embedding_centres_ or {}
        if not all(str(name) in recorded for name in names):
            return None
        return np.asarray([recorded[str(name)] for name in names], dtype=np.float32)

    def _centred_on_prior(
        self,
        get_latent: Callable[..., Any],
        adata: AnnData | None,
        indices: Sequence[int] | None,
        batch_size: int | None,
        dataloader: Iterable[dict[str, torch.Tensor]] | None,
        **kwargs: Any,
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """``get_latent``'s embedding, minus the centre of each cell's dataset where the module centres it.

        A dataset's centre is the one recorded when the model was trained or the query mapped, so a cell's embedding
        does not depend on the other cells passed with it. For a dataset without one (data registered later, or a
        model saved before centres were recorded), it is the mean prior mean over the dataset's cells in ``adata``
        (for a ``dataloader``, in the data whose codes were set last).
        """
        if not self._centres_embedding():
            return get_latent(adata=adata, indices=indices, batch_size=batch_size, dataloader=dataloader, **kwargs)
        self._check_if_trained(warn=False)
        if dataloader is None:
            manager = self.get_anndata_manager(adata, required=True)
            centres = self._recorded_centres(manager)
            if centres is not None:
                latent = get_latent(adata=adata, indices=indices, batch_size=batch_size, **kwargs)
                dataset = np.asarray(manager.get_from_registry(SCT_REGISTRY_KEYS.DATASET_KEY)).ravel().astype(int)
                return _shifted(latent, centres[dataset if indices is None else dataset[np.asarray(indices)]])
            self._prepare_prior(adata)
            dataloader = self._make_data_loader(adata=adata, indices=indices, batch_size=batch_size)
        shift_of = self._embedding_shifts()
        shifts: list[torch.Tensor] = []

        def recording(loader):
            for tensors in loader:
                shifts.append(shift_of(tensors).cpu())
                yield tensors

        latent = get_latent(adata=None, indices=None, batch_size=None, dataloader=recording(dataloader), **kwargs)
        return _shifted(latent, torch.cat(shifts).numpy() if shifts else 0.0)

    def get_pseudobulk_codes(self, adata: AnnData | None = None) -> pd.DataFrame:
        """Soft PB-Cond codes of the data's dataset-donor groups.

        Parameters
        ----------
        adata
            Registered data; the training data by default. New groups are assigned to the frozen
            centroids, never refit.

        Returns
        -------
        ``(n_groups, M + 1)`` DataFrame indexed by ``(dataset, donor)``: columns ``code_0`` ... ``code_{M-1}``
        and ``cluster``, the nearest centroid.
        """
        self._require_pseudobulk_prior()
        manager = self.get_anndata_manager(self._validate_anndata(adata), required=True)
        codes, _, _, names = self._codes(manager)
        frame = pd.DataFrame(codes, index=names, columns=[f"code_{m}" for m in range(codes.shape[1])])
        frame["cluster"] = codes.argmax(axis=1)
        return frame

    @torch.inference_mode()
    def get_prior_margin(self, adata: AnnData | None = None, batch_size: int | None = None, seed: int = 0) -> float:
        """Matched-vs-random prior margin (paper Figure "PB-Cond ablation and prior-geometry diagnostics").

        For each cell, the KL from its posterior to the prior of a random *other* group minus the
        KL to its own group's prior, averaged over cells. Positive values mean the posterior sits
        closer to its matched prior.

        Parameters
        ----------
        adata
            Registered data with at least two dataset-donor groups.
        batch_size
            Cells per batch.
        seed
            Seed for drawing the other group of each cell.
        """
        self._require_pseudobulk_prior()
        adata = self._validate_anndata(adata)
        manager = self.get_anndata_manager(adata, required=True)
        codes, _, _, _ = self._codes(manager)
        if codes.shape[0] < 2:
            raise ValueError("The prior margin needs at least two dataset-donor groups.")
        group, *_ = self._groups(manager)
        rng = np.random.default_rng(seed)
        other = (group + rng.integers(1, codes.shape[0], size=group.size)) % codes.shape[0]
        width = self.module.prior.to_mean.in_features
        table = torch.zeros(codes.shape[0], width, device=self.device)
        table[:, : codes.shape[1]] = torch.as_tensor(codes, dtype=torch.float32)
        self.module.eval()
        margins, start = [], 0
        for tensors in self._make_data_loader(adata=adata, batch_size=batch_size):
            out = self.module.inference(tensors[REGISTRY_KEYS.X_KEY].to(self.device))
            q_mean = out[SCT_MODULE_KEYS.QZ_TOKENS_MEAN_KEY]
            q_logvar = out[SCT_MODULE_KEYS.QZ_TOKENS_LOGVAR_KEY]
            stop = start + q_mean.shape[0]
            kls = []
            for rows in (group[start:stop], other[start:stop]):
                p_mean, p_logvar = self.module.prior(table[torch.as_tensor(rows, device=self.device)])
                kls.append(gaussian_kl(q_mean, q_logvar, p_mean, p_logvar).sum(dim=(-2, -1)))
            margins.append((kls[1] - kls[0]).cpu())
            start = stop
        return float(torch.cat(margins).mean())

    def _require_pseudobulk_prior(self) -> None:
        if self.module.prior is None:
            raise ValueError("This model uses the standard-normal prior (prior='normal'); it has no pseudo-bulk codes.")

    def get_elbo(self, adata: AnnData | None = None, *args, **kwargs) -> float:
        """ELBO as in :meth:`scvi.model.base.VAEMixin.get_elbo`, with the data's PB-Cond codes."""
        self._prepare_prior(adata)
        return super().get_elbo(adata, *args, **kwargs)

    def get_reconstruction_error(self, adata: AnnData | None = None, *args, **kwargs) -> dict[str, float]:
        """Reconstruction error as in :meth:`scvi.model.base.VAEMixin.get_reconstruction_error`."""
        self._prepare_prior(adata)
        return super().get_reconstruction_error(adata, *args, **kwargs)

    def get_marginal_ll(self, adata: AnnData | None = None, *args, **kwargs) -> float | torch.Tensor:
        """Importance-sampled marginal log-likelihood as in :meth:`scvi.model.base.VAEMixin.get_marginal_ll`.

        See :meth:`~sctrilemma.module.SCTrilemmaModule.marginal_ll`; higher is better.
        """
        self._prepare_prior(adata)
        return super().get_marginal_ll(adata, *args, **kwargs)


def _shifted(latent: np.ndarray | tuple[np.ndarray, np.ndarray], shift) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """The embedding ``latent`` minus ``shift``; with ``return_dist``'s variance, the mean moves and it does not."""
    if isinstance(latent, tuple):
        return latent[0] - shift, latent[1]
    return latent - shift
