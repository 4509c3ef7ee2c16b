"""The user-facing SCTrilemma model (scvi-tools ``BaseModelClass``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from scvi import REGISTRY_KEYS, settings
from scvi.data import AnnDataManager, fields
from scvi.data._utils import _check_if_view
from scvi.model.base import BaseMinifiedModeModelClass, RNASeqMixin, UnsupervisedTrainingMixin, VAEMixin
from scvi.utils import setup_anndata_dsp

from sctrilemma._constants import SCT_REGISTRY_KEYS
from sctrilemma._validation import (
    check_cell_expression,
    check_counts,
    check_obs_keys,
    check_unique_var_names,
    registered_matrix_name,
)
from sctrilemma.model._census_mixin import CensusMixin
from sctrilemma.model._data_setup import DataSetupMixin
from sctrilemma.model._expression import ExpressionMixin
from sctrilemma.model._label_transfer import LabelTransferMixin
from sctrilemma.model._minify_mixin import MinifyMixin, is_minified_without_counts
from sctrilemma.model._presets import (
    SCTrilemmaTrainRunner,
    fit_batch_to_memory,
    model_settings,
    preset_settings,
    training_arguments,
)
from sctrilemma.model._reference_mixin import ReferenceMixin
from sctrilemma.model._utils import (
    check_cells_have_counts,
    count_matrix,
    gene_names,
    gene_symbols,
    layer_matrix,
    refuse_scvi_covariates,
    training_split,
)
from sctrilemma.module import SCTrilemmaModule
from sctrilemma.train import SCTrilemmaTrainingPlan
from sctrilemma.train._threads import ThreadTunedLoader, user_chose_threads

if TYPE_CHECKING:
    from collections.abc import Sequence

    from anndata import AnnData
    from mudata import MuData

    from sctrilemma.model._presets import Preset
    from sctrilemma.nn._layers import DecoderQuery, GeneEncoding, Pooling

logger = logging.getLogger(__name__)

MIN_EXPRESSED_GENES = 5
PriorOption = Literal["pseudobulk", "normal", "shuffled"]


class SCTrilemma(
    MinifyMixin,
    CensusMixin,
    ReferenceMixin,
    LabelTransferMixin,
    ExpressionMixin,
    DataSetupMixin,
    RNASeqMixin,
    VAEMixin,
    UnsupervisedTrainingMixin,
    BaseMinifiedModeModelClass,
):
    """scTrilemma: a gene-token Perceiver VAE with E-Gate, C-Route and PB-Cond :cite:p:`sctrilemma`.

    Parameters
    ----------
    adata
        AnnData (or MuData) registered with :meth:`setup_anndata` (or :meth:`setup_mudata`).
    registry
        Registry of a saved model; used by :meth:`load` to build a model without data.
    preset
        ``"paper"`` (the paper's sizes and recipe) or ``"small"`` (CPU-sized), the same on every machine: the
        device chooses precision and kernels, never the model. Its settings are the ``"model"`` group of
        :data:`~sctrilemma.model.PRESETS`; the arguments below, and any other of those settings given as a keyword
        argument (e.g. ``encoder_genes="all"``), override them. An argument left at ``None`` takes the preset's value.
    n_hidden
        Token width ``d``.
    n_latent_tokens
        Number ``K`` of latent tokens.
    crop_size
        Gene positions per cell.
    n_encoder_layers, n_decoder_layers
        Cross-attention blocks in the encoder and the decoder.
    n_heads
        Attention heads.
    dropout_rate
        Dropout rate.
    n_decoder_targets
        Decoder targets per cell in training: ``"crop"`` reconstructs the paper's crop; a number samples
        that many genes per cell with weights (see :class:`~sctrilemma.module.SCTrilemmaModule`).
    prior
        ``"pseudobulk"`` (PB-Cond), ``"normal"``, or ``"shuffled"`` (PB-Cond, groups permuted to codes: a control).
    n_prior_codes
        Number ``M`` of pseudo-bulk centroids.
    gene_encoding
        ``"gate"`` (E-Gate) or ``"additive"`` (ablation).
    decoder_query
        ``"gate"`` (C-Route), ``"additive"`` or ``"none"`` (ablations).
    pooling
        ``"mean"`` (paper) or ``"attention"`` (ablation).
    **module_kwargs
        Passed to :class:`~sctrilemma.module.SCTrilemmaModule`.

    Examples
    --------
    >>> adata = sctrilemma.data.load_example()
    >>> sctrilemma.SCTrilemma.setup_anndata(adata, donor_key="donor")
    >>> model = sctrilemma.SCTrilemma(adata, preset="small")
    >>> model.train(max_epochs=5)
    >>> adata.obsm["X_sctrilemma"] = model.get_latent_representation()

    See Also
    --------
    sctrilemma.module.SCTrilemmaModule
    """

    _module_cls = SCTrilemmaModule
    _training_plan_cls = SCTrilemmaTrainingPlan
    _train_runner_cls = SCTrilemmaTrainRunner

    def __init__(
        self,
        adata: AnnData | MuData | None = None,
        registry: dict | None = None,
        preset: Preset = "small",
        n_hidden: int | None = None,
        n_latent_tokens: int | None = None,
        crop_size: int | None = None,
        n_encoder_layers: int | None = None,
        n_decoder_layers: int | None = None,
        n_heads: int | None = None,
        dropout_rate: float | None = None,
        n_decoder_targets: int | Literal["crop"] | None = None,
        prior: PriorOption = "pseudobulk",
        n_prior_codes: int = 32,
        gene_encoding: GeneEncoding = "gate",
        decoder_query: DecoderQuery = "gate",
        pooling: Pooling = "mean",
        **module_kwargs,
    ) -> None:
        super().__init__(adata, registry)
        if prior not in ("pseudobulk", "normal", "shuffled"):
            raise ValueError(f"`prior` must be 'pseudobulk', 'normal' or 'shuffled', got {prior!r}.")
        preset_keys = preset_settings(preset)["model"]
        named = {
            "n_hidden": n_hidden,
            "n_latent_tokens": n_latent_tokens,
            "crop_size": crop_size,
            "n_encoder_layers": n_encoder_layers,
            "n_decoder_layers": n_decoder_layers,
            "n_heads": n_heads,
            "dropout_rate": dropout_rate,
            "n_decoder_targets": n_decoder_targets,
            **{key: module_kwargs.pop(key) for key in list(module_kwargs) if key in preset_keys},
        }
        sizes = model_settings(preset, named)
        self.prior_ = prior
        self._preset = preset
        self.pseudobulk_codebook_: dict | None = None
        self.gene_names_ = None if adata is None else gene_names(adata, self.registry_)
        self.gene_symbols_ = None if adata is None else gene_symbols(adata, self.registry_)
        self.module = self._module_cls(
            self.summary_stats.n_vars,
            **sizes,
            prior="normal" if prior == "normal" else "pseudobulk",
            n_prior_codes=n_prior_codes,
            gene_encoding=gene_encoding,
            decoder_query=decoder_query,
            pooling=pooling,
            **module_kwargs,
        )
        self.module.minified_data_type = self.minified_data_type
        self._model_summary_string = (
            f"SCTrilemma (preset={preset!r}): {self.summary_stats.n_vars} genes, d={sizes['n_hidden']}, "
            f"K={sizes['n_latent_tokens']}, crop={sizes['crop_size']}, "
            f"blocks={sizes['n_encoder_layers']}+{sizes['n_decoder_layers']}, heads={sizes['n_heads']}, "
            f"prior={prior!r}, gene_encoding={gene_encoding!r}, decoder_query={decoder_query!r}, "
            f"pooling={pooling!r}, {sum(p.numel() for p in self.module.parameters()):,} parameters"
        )
        self.init_params_ = self._get_init_params(locals())
        # Saved models record the resolved sizes, so they load the same if a preset's defaults change.
        module_kwargs_ = self.init_params_["kwargs"].setdefault("module_kwargs", {})
        for key, value in sizes.items():
            (self.init_params_["non_kwargs"] if key in self.init_params_["non_kwargs"] else module_kwargs_)[key] = value
        logger.info(self._model_summary_string)

    def __repr__(self) -> str:
        status = "trained" if self.is_trained_ else "not trained"
        minified = "minified " if self.minified_data_type is not None else ""
        data = "no data" if self.adata is None else f"{self.adata.n_obs} {minified}cells"
        return f"{self._model_summary_string}; {status}; {data}"

    # ------------------------------------------------------------------ setup
    @classmethod
    @setup_anndata_dsp.dedent
    def setup_anndata(
        cls,
        adata: AnnData,
        layer: str | None = None,
        donor_key: str | None = None,
        dataset_key: str | None = None,
        **kwargs,
    ) -> None:
        """%(summary)s.

        Parameters
        ----------
        %(param_adata)s
        layer
            Layer with raw counts; ``None`` uses ``adata.X``.
        donor_key
            Column of ``adata.obs`` with the donor of each cell. Donors define PB-Cond's groups.
        dataset_key
            Column of ``adata.obs`` with the dataset (study) of each cell; one dataset when ``None``.
        **kwargs
            Passed to :meth:`~scvi.data.AnnDataManager.register_fields`.
        """
        refuse_scvi_covariates(kwargs)
        setup_method_args = cls._get_setup_method_args(**locals())
        if not kwargs.get("source_registry") and not is_minified_without_counts(adata):
            check_obs_keys(adata.obs, {"donor_key": donor_key, "dataset_key": dataset_key})
            check_unique_var_names(adata.var_names, adata.var, where="adata")
            matrix = adata.X if layer is None else layer_matrix(adata, layer)
            _check_cell_expression(matrix, adata.obs_names, registered_matrix_name(adata, layer))
        anndata_fields = [
            fields.LayerField(REGISTRY_KEYS.X_KEY, layer, is_count_data=True),
            fields.CategoricalObsField(REGISTRY_KEYS.BATCH_KEY, None),
            fields.CategoricalObsField(SCT_REGISTRY_KEYS.DONOR_KEY, donor_key),
            fields.CategoricalObsField(SCT_REGISTRY_KEYS.DATASET_KEY, dataset_key),
            *cls._minified_fields(adata, kwargs.get("source_registry")),
        ]
        adata_manager = AnnDataManager(fields=anndata_fields, setup_method_args=setup_method_args)
        adata_manager.register_fields(adata, **kwargs)
        cls.register_manager(adata_manager)

    @classmethod
    @setup_anndata_dsp.dedent
    def setup_mudata(
        cls,
        mdata: MuData,
        rna_layer: str | None = None,
        donor_key: str | None = None,
        dataset_key: str | None = None,
        modalities: dict[str, str] | None = None,
        **kwargs,
    ) -> None:
        """%(summary_mdata)s.

        Only the RNA modality is modelled (e.g. the gene-expression part of multiome data).

        Parameters
        ----------
        %(param_mdata)s
        rna_layer
            Layer of the RNA modality with raw counts; ``None`` uses its ``.X``.
        donor_key
            Column of ``mdata.obs`` (or of the modality named in ``modalities``) with donors.
        dataset_key
            Column with datasets; one dataset when ``None``.
        modalities
            Maps setup arguments to modality names; ``{"rna_layer": "rna"}`` by default.
        **kwargs
            Passed to :meth:`~scvi.data.AnnDataManager.register_fields`.

        Examples
        --------
        >>> sctrilemma.SCTrilemma.setup_mudata(mdata, donor_key="donor", modalities={"rna_layer": "rna"})
        """
        refuse_scvi_covariates(kwargs)
        setup_method_args = cls._get_setup_method_args(**locals())
        modalities = cls._create_modalities_attr_dict(modalities or {"rna_layer": "rna"}, setup_method_args)
        if modalities.rna_layer is None or modalities.rna_layer not in mdata.mod:
            raise ValueError(
                f"RNA modality {modalities.rna_layer!r} not found in the MuData (modalities: {list(mdata.mod)}). "
                "Pass `modalities={'rna_layer': NAME}`."
            )
        if not kwargs.get("source_registry"):
            for argument, column in {"donor_key": donor_key, "dataset_key": dataset_key}.items():
                mod = getattr(modalities, argument)
                obs = mdata.obs if mod is None else mdata.mod[mod].obs
                check_obs_keys(obs, {argument: column}, where="mdata.obs" if mod is None else f"mdata.mod[{mod!r}].obs")
            rna = mdata.mod[modalities.rna_layer]
            check_unique_var_names(rna.var_names, rna.var, where=f"mdata.mod[{modalities.rna_layer!r}]")
            matrix = rna.X if rna_layer is None else layer_matrix(rna, rna_layer)
            _check_cell_expression(matrix, rna.obs_names, registered_matrix_name(rna, rna_layer, modalities.rna_layer))
        mudata_fields = [
            fields.MuDataLayerField(
                REGISTRY_KEYS.X_KEY, rna_layer, mod_key=modalities.rna_layer, is_count_data=True, mod_required=True
            ),
            fields.MuDataCategoricalObsField(REGISTRY_KEYS.BATCH_KEY, None, mod_key=None),
            fields.MuDataCategoricalObsField(SCT_REGISTRY_KEYS.DONOR_KEY, donor_key, mod_key=modalities.donor_key),
            fields.MuDataCategoricalObsField(
                SCT_REGISTRY_KEYS.DATASET_KEY, dataset_key, mod_key=modalities.dataset_key
            ),
        ]
        adata_manager = AnnDataManager(fields=mudata_fields, setup_method_args=setup_method_args)
        adata_manager.register_fields(mdata, **kwargs)
        cls.register_manager(adata_manager)

    def _validate_anndata(self, adata: AnnData | MuData | None = None, copy_if_view: bool = True) -> AnnData:
        """Register new data from the model's setup (new donors allowed) after checking genes and counts."""
        if adata is None:
            return super()._validate_anndata(adata, copy_if_view=copy_if_view)
        genes = gene_names(adata, self.registry_)
        if self.gene_names_ is not None and not np.array_equal(genes, self.gene_names_):
            shared = np.intersect1d(genes, self.gene_names_).size
            raise ValueError(
                f"The data's genes differ from the model's ({genes.size} vs {self.gene_names_.size} genes, "
                f"{shared} shared, or a different order). For another gene set or gene symbols use "
                "`SCTrilemma.load_query_data(adata, model)`; with all genes present, `adata[:, model.gene_names_]`."
            )
        if self.get_anndata_manager(adata) is not None:
            return super()._validate_anndata(adata, copy_if_view=copy_if_view)
        setup_args = self.registry_["setup_args"]
        method = getattr(type(self), self.registry_.get("setup_method_name", "setup_anndata"))
        _check_if_view(adata, copy_if_view=copy_if_view)
        check_counts(count_matrix(adata, self.registry_), where="the data's counts")
        method(adata, source_registry=self.registry_, extend_categories=True, **setup_args)
        manager = self._get_most_recent_anndata_manager(adata, required=True)
        if self.adata_manager is None:
            self._adata, self._adata_manager = adata, manager
        self._register_manager_for_instance(manager)
        return adata

    # ------------------------------------------------------------------ training
    def train(
        self,
        max_epochs: int | None = None,
        max_steps: int | None = None,
        batch_size: int | None = None,
        train_size: float | None = None,
        validation_size: float | None = None,
        accelerator: str = "auto",
        devices: int | list[int] | str = "auto",
        min_expressed_genes: int = MIN_EXPRESSED_GENES,
        datasplitter_kwargs: dict | None = None,
        plan_kwargs: dict | None = None,
        check_memory: bool = True,
        early_stopping: bool | None = None,
        weight_averaging: bool | None = None,
        **trainer_kwargs,
    ) -> None:
        """Train through scvi-tools' runner with :class:`~sctrilemma.train.SCTrilemmaTrainingPlan`.

        Every argument left at ``None`` takes the preset's value (the ``"train"`` and ``"plan"`` groups of
        :data:`~sctrilemma.model.PRESETS`; the user guide's table). Both presets use AdamW with a linear warm-up then
        cosine decay, a KL weight rising linearly to 5e-4, gradient clipping at 1.0 and ``precision="bf16-mixed"`` on
        CUDA.
        Cells with fewer than ``min_expressed_genes`` expressed genes are left out of training (they go to the test
        split). The small preset's encoder, and so the embedding, stops learning after 1,200 steps
        (``encoder_lr_steps``) while a longer run trains the decoder on.

        Parameters
        ----------
        max_epochs
            Passes over the training cells.
        max_steps
            Optimisation steps; overrides ``max_epochs``. With neither, the small preset trains 1,200 steps (on an
            AnnData, one pass over the training cells where that is longer), the paper preset scVI's
            :func:`~scvi.model.get_max_epochs_heuristic` capped at 50 epochs.
        batch_size
            Cells per step: 256 (``"paper"``, per GPU as in the paper) or 64 (``"small"``) by default.
        train_size, validation_size
            Split fractions as in scvi-tools (default 0.9 train, rest validation).
        accelerator, devices
            Lightning accelerator and devices (e.g. ``devices=4, strategy="ddp"``).
        min_expressed_genes
            Cells with fewer expressed genes are not trained on.
        datasplitter_kwargs
            Passed to :class:`~scvi.dataloaders.DataSplitter`. ``{"external_indexing": [train, validation, test]}``
            replaces the model's split (then ``min_expressed_genes`` is not applied).
        plan_kwargs
            Passed to :class:`~sctrilemma.train.SCTrilemmaTrainingPlan`, over the preset's (``lr`` 2e-4 for the paper
            preset, 5e-3 for the small one).
        check_memory
            Off CUDA, shrink ``batch_size`` to fit the memory available (with a warning) before training.
        early_stopping
            End training once the validation cells' ``early_stopping_monitor`` has not improved for
            ``early_stopping_patience`` epochs (scvi-tools' keywords, given as ``trainer_kwargs``); one log line says
            so. ``None``: as the preset (on, 10 epochs of the reconstruction loss, for the small preset; off for the
            paper's).
        weight_averaging
            Validate on and end with :class:`~sctrilemma.train.ExponentialWeightAverage` of the weights; ``None``: as
            the preset (on for the small preset, off for the paper's).
        **trainer_kwargs
            Passed to :class:`~scvi.train.Trainer` (e.g. ``max_time``, ``strategy``, ``num_nodes``).

        Notes
        -----
        A model from :meth:`~sctrilemma.SCTrilemma.from_census` streams its cells instead: ``batch_size``, the split and
        ``min_expressed_genes`` are then the data module's, and training uses every selected cell.
        Under DDP the posterior BatchNorm normalises with statistics all-reduced over ranks.
        """
        self._refuse_training_if_minified()
        if self._nothing_to_train():
            return None
        uses_cuda = torch.cuda.is_available() and accelerator in ("auto", "gpu", "cuda")
        recipe = {"early_stopping": early_stopping, "weight_averaging": weight_averaging, "uses_cuda": uses_cuda}
        if self.datamodule is not None:
            return self._train_streamed(
                max_epochs, max_steps, accelerator, devices, plan_kwargs, recipe, trainer_kwargs
            )
        batch_size = preset_settings(self._preset)["train"]["batch_size"] if batch_size is None else batch_size
        if check_memory and not uses_cuda:
            batch_size = fit_batch_to_memory(self.module, self.summary_stats.n_vars, batch_size, self._preset)
        n_expressed = self._prepare_training()
        datasplitter_kwargs = dict(datasplitter_kwargs or {})
        splits = datasplitter_kwargs.get("external_indexing") or training_split(
            n_expressed, train_size, validation_size, min_expressed_genes, seed=settings.seed
        )
        datasplitter_kwargs["external_indexing"] = splits
        arguments = training_arguments(
            self._preset,
            n_obs=self.adata.n_obs,
            n_training_cells=np.asarray(splits[0]).size,
            batch_size=batch_size,
            max_epochs=max_epochs,
            max_steps=max_steps,
            plan_kwargs=plan_kwargs,
            trainer_kwargs=trainer_kwargs,
            has_validation_cells=np.asarray(splits[1]).size > 0,
            **recipe,
        )
        super().train(accelerator=accelerator, devices=devices, datasplitter_kwargs=datasplitter_kwargs, **arguments)
        self._fix_embedding_centres(self.adata, keep=False)

    # ------------------------------------------------------------------ outputs
    def get_latent_representation(
        self,
        adata: AnnData | MuData | None = None,
        indices: Sequence[int] | None = None,
        give_mean: bool = True,
        mc_samples: int = 5000,
        batch_size: int | None = None,
        return_dist: bool = False,
        dataloader=None,
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Cell embeddings ``r`` (mean over ``K`` of the posterior mean tokens), ``(n_obs, n_hidden)``.

        Encoder only: it reads each cell's top-``crop_size`` expressed genes, at one depth in the small preset, which
        also reports ``r`` minus its dataset's centre (``embedding_centred_on_prior``): the mean PB-Cond prior mean of
        the dataset's cells, fixed when the model was trained or, for a query's datasets, when it was mapped. A cell's
        embedding depends on that cell alone: a subset, or cells one by one, give the rows of all cells together.
        Within a dataset, distances are those of ``r``.
        ``return_dist=True`` returns the mean and variance of the pooled posterior (see
        :meth:`~sctrilemma.module.SCTrilemmaModule.pooled_posterior`). In evaluation mode ``z``
        is the posterior mean, so ``give_mean=False`` gives the same embedding.

        Raises
        ------
        ValueError
            If a requested cell has no counts.
        """
        if dataloader is None:
            adata = self._validate_anndata(adata)
            self._check_cells_have_counts(adata, indices)
        get_latent = super().get_latent_representation
        kwargs = {"give_mean": give_mean, "mc_samples": mc_samples, "return_dist": return_dist}
        return self._centred_on_prior(get_latent, adata, indices, batch_size, dataloader, **kwargs)

    def _make_data_loader(self, *args, **kwargs):
        """scvi-tools' inference data loader; on the CPU its batches run at the fastest of a few thread counts.

        Unless the user set torch's thread count: see :class:`~sctrilemma.train.ThreadChooser`.
        """
        loader = super()._make_data_loader(*args, **kwargs)
        if self.device.type == "cpu" and not user_chose_threads():
            return ThreadTunedLoader(loader)
        return loader

    def _check_cells_have_counts(self, adata: AnnData | MuData, indices: Sequence[int] | None) -> None:
        check_cells_have_counts(self.get_anndata_manager(adata, required=True), indices)


def _check_cell_expression(matrix, obs_names, where: str) -> None:
    # + 2: this helper and setup_anndata/setup_mudata sit between the user's call and the warning.
    stacklevel = settings.warnings_stacklevel + 2
    check_cell_expression(matrix, obs_names, where=where, min_genes=MIN_EXPRESSED_GENES, stacklevel=stacklevel)
