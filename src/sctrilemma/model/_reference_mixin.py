"""Save/load in the safe reference format, and zero-shot query mapping."""

from __future__ import annotations

import copy
import logging
import warnings
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anndata as ad
import numpy as np
import pandas as pd
import torch
from scvi import settings
from scvi.model._utils import parse_device_args

from sctrilemma.io._reference import read_reference, versions, write_reference
from sctrilemma.model._label_transfer import LabelClassifier
from sctrilemma.model._minify_mixin import check_minified_load
from sctrilemma.model._query import (
    GENE_MATCH_KEY,
    cells_without_reference_counts,
    empty_after_matching_message,
    project_query,
    replace_contents,
    warn_if_few_encoder_genes,
)

if TYPE_CHECKING:
    import os

    from mudata import MuData

logger = logging.getLogger(__name__)

# What a saved ``None`` meant for the settings that now name that value.
SAVED_NONE_MEANT = {"n_decoder_targets": "crop", "encoder_genes": "all", "embedding_depth_quantile": "observed"}

REFERENCE_ATTRIBUTES = ("prior_", "is_trained_", "embedding_centres_")
SPLIT_ATTRIBUTES = ("train_indices", "validation_indices", "test_indices")


class ReferenceMixin:
    """Self-contained references (:meth:`save`, :meth:`load`) and zero-shot queries."""

    # ------------------------------------------------------------------ save / load
    def _reference_metadata(self) -> dict[str, Any]:
        codebook = self.pseudobulk_codebook_
        history = {
            name: {"index": [int(i) for i in frame.index], "value": frame.iloc[:, 0].astype(float).tolist()}
            for name, frame in (self.history_ or {}).items()
        }
        return {
            "model_name": type(self).__name__,
            "config": self.init_params_,
            "registry": dict(self.registry_),
            "genes": [str(g) for g in self.gene_names_],
            "gene_symbols": None if self.gene_symbols_ is None else [str(s) for s in self.gene_symbols_],
            "codebook": None if codebook is None else {k: v for k, v in codebook.items() if k != "centroids"},
            "attributes": {name: getattr(self, name) for name in REFERENCE_ATTRIBUTES},
            "label_classifier": None if self.label_classifier_ is None else self.label_classifier_.to_dict(),
            "history": history,
            "versions": versions(),
        }

    def save(
        self,
        dir_path: str | os.PathLike,
        prefix: str | None = None,
        overwrite: bool = False,
        save_anndata: bool = False,
        save_kwargs: dict | None = None,
        legacy_mudata_format: bool = False,
        datamodule=None,
        **anndata_write_kwargs,
    ) -> None:
        """Save a self-contained reference to ``dir_path/<prefix>model.safetensors``.

        The arguments are scvi-tools' (:meth:`scvi.model.base.BaseModelClass.save`). The file holds the weights, the
        configuration, the gene vocabulary (Ensembl IDs and symbols when known), the PB-Cond codebook, the label
        classifier (:meth:`fit_label_classifier`), the scvi-tools registry, the training split's indices, package
        versions and a checksum. It is written to a temporary file and renamed, so an interrupted save leaves an earlier
        reference intact. Loading it never unpickles anything.

        Parameters
        ----------
        dir_path
            Directory to write (created if needed).
        prefix
            Prepended to the file names.
        overwrite
            Replace an existing reference.
        save_anndata
            Also write the model's AnnData to ``dir_path/<prefix>adata.h5ad`` (``mdata.h5mu`` for MuData).
        save_kwargs, legacy_mudata_format, datamodule
            scvi-tools arguments for its pickle-based ``model.pt``; they have no effect here.
        **anndata_write_kwargs
            Passed to :meth:`anndata.AnnData.write_h5ad`.
        """
        del save_kwargs, legacy_mudata_format, datamodule
        codebook = self.pseudobulk_codebook_
        splits = {
            name: torch.as_tensor(np.asarray(getattr(self, f"{name}_"), dtype=np.int64))
            for name in SPLIT_ATTRIBUTES
            if getattr(self, f"{name}_", None) is not None
        }
        if save_anndata and self.adata is None:
            raise ValueError(
                "`save_anndata=True` but the model has no AnnData; attach one or pass `save_anndata=False`."
            )
        write_reference(
            dir_path,
            self.module.state_dict(),
            self._reference_metadata(),
            None if codebook is None else codebook["centroids"],
            overwrite=overwrite,
            prefix=prefix,
            extra=splits,
        )
        if save_anndata:
            self.adata.write(Path(dir_path) / _data_file_name(self.adata, prefix), **anndata_write_kwargs)

    @staticmethod
    def load_registry(dir_path: str | os.PathLike, prefix: str | None = None) -> dict:
        """The scvi-tools registry saved in a reference, as :meth:`scvi.model.base.BaseModelClass.load_registry`."""
        return read_reference(dir_path, prefix=prefix).metadata["registry"]

    @staticmethod
    def view_setup_args(dir_path: str | os.PathLike, prefix: str | None = None) -> None:
        """Print the setup arguments of a saved reference, as :meth:`scvi.model.base.BaseModelClass.view_setup_args`."""
        import rich.pretty  # noqa: F401 - scvi-tools 1.4.2 uses `rich.pretty` here without importing it
        from scvi.data import AnnDataManager

        AnnDataManager.view_setup_method_args(ReferenceMixin.load_registry(dir_path, prefix))

    @classmethod
    def _from_parts(cls, module_state: dict[str, torch.Tensor], metadata: dict[str, Any]):
        if metadata.get("model_name") != cls.__name__:
            raise ValueError(f"The reference holds a {metadata.get('model_name')!r} model, not {cls.__name__}.")
        registry = copy.deepcopy(dict(metadata["registry"]))
        registry["field_registries"] = defaultdict(dict, registry["field_registries"])
        config = metadata["config"]
        kwargs = {k: v for group in config.get("kwargs", {}).values() for k, v in group.items()}
        kwargs.setdefault("embedding_centred_on_prior", False)  # saved before the setting: embed as they did
        non_kwargs = dict(config["non_kwargs"])
        for group in (kwargs, non_kwargs):  # models saved when ``None`` spelled these settings' own values
            group.update({k: SAVED_NONE_MEANT[k] for k, v in group.items() if v is None and k in SAVED_NONE_MEANT})
        model = cls(None, registry=registry, **non_kwargs, **kwargs)
        model.module.load_state_dict(module_state)
        model.gene_names_ = np.asarray(metadata["genes"], dtype=object)
        symbols = metadata.get("gene_symbols")
        model.gene_symbols_ = None if symbols is None else np.asarray(symbols, dtype=object)
        model.pseudobulk_codebook_ = metadata.get("codebook")
        for name, value in metadata.get("attributes", {}).items():
            setattr(model, name, value)
        classifier = metadata.get("label_classifier")
        model.label_classifier_ = None if classifier is None else LabelClassifier.from_dict(classifier)
        model.history_ = {
            name: pd.DataFrame({name: entry["value"]}, index=pd.Index(entry["index"], name="epoch"))
            for name, entry in metadata.get("history", {}).items()
        }
        model.module.eval()
        return model

    @classmethod
    def load(
        cls,
        dir_path: str | os.PathLike,
        adata: ad.AnnData | MuData | None = None,
        accelerator: str = "auto",
        device: int | str = "auto",
        prefix: str | None = None,
        backup_url: str | None = None,
        datamodule=None,
        allowed_classes_names_list: list[str] | None = None,
    ):
        """Load a reference written by :meth:`~sctrilemma.SCTrilemma.save` (scvi-tools' arguments).

        Parameters
        ----------
        dir_path
            Directory with ``<prefix>model.safetensors``.
        adata
            Data with the model's genes to attach (a query mapped by :meth:`prepare_query_anndata`, for one); by
            default the saved ``adata.h5ad`` if there is one, else none (the model embeds data passed later).
        accelerator, device
            Where to put the model (scvi-tools conventions).
        prefix
            Prefix of the saved file names.
        backup_url
            Not supported (references are not downloaded); must be ``None``.
        datamodule
            Not used.
        allowed_classes_names_list
            Model class names accepted besides ``SCTrilemma``.

        Returns
        -------
        The model, in evaluation mode, with the saved training split (``train_indices`` ...).

        Raises
        ------
        ValueError
            For a corrupt, truncated, tampered or pickle-based file.
        """
        del datamodule
        if backup_url is not None:
            raise ValueError(
                f"`backup_url={backup_url!r}` is not supported: download the reference directory yourself and "
                "pass its path."
            )
        reference = read_reference(dir_path, prefix=prefix)
        if allowed_classes_names_list and reference.metadata.get("model_name") in allowed_classes_names_list:
            reference.metadata["model_name"] = cls.__name__
        model = cls._from_parts(reference.module_state, reference.metadata)
        for name in SPLIT_ATTRIBUTES:
            if name in reference.extra:
                setattr(model, f"{name}_", reference.extra[name].numpy())
        _, _, torch_device = parse_device_args(accelerator=accelerator, devices=device, return_device="torch")
        model.to_device(torch_device)
        if adata is None:
            adata = _read_saved_data(Path(dir_path), prefix)
        if adata is not None:
            check_minified_load(model.registry_, adata)
            model.adata = adata
        return model

    # ------------------------------------------------------------------ zero-shot queries
    @classmethod
    def prepare_query_anndata(
        cls,
        adata: ad.AnnData,
        reference_model,
        return_reference_var_names: bool = False,
        inplace: bool = True,
        layer: str | None = None,
        donor_key: str | None = None,
        dataset_key: str | None = None,
        min_overlap: float = 0.5,
    ) -> ad.AnnData | pd.Index | None:
        """A query in the reference's gene space, ready for zero-shot use (scvi-tools' arguments).

        Genes are matched by Ensembl ID (version suffixes such as ``.3`` stripped) or by symbol
        (``var_names`` or a ``gene_symbols``-like column), whichever matches more; a report is
        logged. Reference genes the query did not measure are zero columns and are flagged in
        ``var["measured"]``; they never become encoder tokens. The counts are read in row chunks, so a
        backed AnnData (``anndata.read_h5ad(path, backed="r")``) works and is never loaded whole; the
        prepared query holds the counts of the reference's genes in memory (sparse).

        Parameters
        ----------
        adata
            Query with raw counts (in memory or backed).
        reference_model
            A trained model or the directory of a saved reference.
        return_reference_var_names
            Only return the reference's genes (``var_names``), as a :class:`pandas.Index`.
        inplace
            Replace ``adata``'s contents with the prepared query (scVI's default) and return ``None``;
            ``False`` leaves ``adata`` unchanged and returns the prepared copy. A backed ``adata`` becomes
            an in-memory AnnData; its file is not changed.
        layer
            Layer with the query's counts; defaults to the reference's layer when the query has it,
            else ``X``.
        donor_key, dataset_key
            Query columns with donors/datasets, copied under the reference's column names; a
            missing column becomes one ``"unknown"`` group.
        min_overlap
            Minimum share of the model's genes that the query must hold (by Ensembl ID, versioned ID or
            symbol); the query may measure any other genes besides.

        Returns
        -------
        ``None`` (``inplace=True``), a new AnnData ``(n_obs, n_reference_genes)``, or the reference's genes.

        Raises
        ------
        ValueError
            If gene names are duplicated, the query holds too few of the model's genes, counts are not raw
            counts, a cell has no counts or a donor/dataset value is missing (the message names the likely cause
            and the fix); ``adata`` is then unchanged.

        Warns
        -----
        UserWarning
            If cells have counts only in genes the reference lacks: they cannot be embedded.
        """
        model = reference_model if isinstance(reference_model, cls) else cls.load(reference_model)
        if return_reference_var_names:
            return pd.Index(model.gene_names_.astype(str))
        query = project_query(adata, model, layer, donor_key, dataset_key, min_overlap)
        empty = cells_without_reference_counts(query)
        if empty.size:
            filtered = "adata" if inplace else "prepared"
            warnings.warn(
                f"{empty_after_matching_message(query, empty, filtered)}"
                f"{'' if inplace else ', where `prepared` is the returned AnnData'}.",
                UserWarning,
                stacklevel=settings.warnings_stacklevel,
            )
        if inplace:
            replace_contents(adata, query)
            return None
        return query

    @classmethod
    def load_query_data(
        cls,
        adata: ad.AnnData,
        reference_model,
        registry: dict | None = None,
        inplace_subset_query_vars: bool = False,
        accelerator: str = "auto",
        device: int | str = "auto",
        unfrozen: bool = False,
        freeze_dropout: bool = False,
        freeze_expression: bool = True,
        freeze_decoder_first_layer: bool = True,
        freeze_batchnorm_encoder: bool = True,
        freeze_batchnorm_decoder: bool = False,
        freeze_classifier: bool = True,
        transfer_batch: bool = True,
        datamodule=None,
        **prepare_kwargs,
    ):
        """A new model that embeds ``adata`` zero-shot with a reference's weights: no training needed.

        The arguments are scvi-tools' (:meth:`scvi.model.base.ArchesMixin.load_query_data`). The reference's
        vocabulary covers every gene the model can use and the PB-Cond codes of new donors come from the
        frozen codebook, so a query adds no parameters: with the default freezing, :meth:`train` has nothing
        to train and leaves every reference weight unchanged (it logs this and returns). ``unfrozen=True``
        fine-tunes all weights on the query; ``freeze_expression=False`` fine-tunes only the gene embeddings
        (with the decoder's gene offsets, where the model has them) and the E-Gate (the encoder's expression input).

        Parameters
        ----------
        adata
            Query with raw counts (any gene set with enough overlap; in memory or backed), mapped with
            :meth:`prepare_query_anndata`, or that method's output, used as it is.
        reference_model
            A trained model (left unchanged) or the directory of a saved reference.
        registry
            Not used (the registry is the reference's).
        inplace_subset_query_vars
            Map ``adata`` itself into the reference's genes (``prepare_query_anndata(inplace=True)``) and
            attach it; by default ``adata`` is left unchanged and a mapped copy is attached.
        accelerator, device
            Where to put the model.
        unfrozen
            Make every weight trainable.
        freeze_dropout
            Switch dropout off for query training.
        freeze_expression
            Keep the gene embeddings (and the decoder's gene offsets) and the E-Gate frozen.
        freeze_batchnorm_encoder
            Keep the posterior BatchNorm's running statistics.
        freeze_decoder_first_layer, freeze_batchnorm_decoder, freeze_classifier, transfer_batch, datamodule
            scVI options without a counterpart here (no batch covariate, no classifier); no effect.
        **prepare_kwargs
            Passed to :meth:`prepare_query_anndata` (``layer``, ``donor_key``, ``dataset_key``, ``min_overlap``).

        Returns
        -------
        The model with the query attached; call :meth:`get_latent_representation`.

        Raises
        ------
        ValueError
            As :meth:`prepare_query_anndata`, and if a cell has no counts in the reference's genes; ``adata``
            is then unchanged.
        """
        del registry, freeze_decoder_first_layer, freeze_batchnorm_decoder, freeze_classifier, transfer_batch
        del datamodule
        if isinstance(reference_model, cls):
            model = cls._from_parts(reference_model.module.state_dict(), reference_model._reference_metadata())
            if reference_model.pseudobulk_codebook_ is not None:
                model.pseudobulk_codebook_ = dict(reference_model.pseudobulk_codebook_)
        else:
            model = cls.load(reference_model)
        query = adata if GENE_MATCH_KEY in adata.uns else project_query(adata, model, **prepare_kwargs)
        empty = cells_without_reference_counts(query)
        if empty.size:
            raise ValueError(
                f"{empty_after_matching_message(query, empty, 'prepared')}, where `prepared = "
                f"{cls.__name__}.prepare_query_anndata(adata, reference, inplace=False)`, and pass `prepared`."
            )
        if inplace_subset_query_vars and query is not adata:
            replace_contents(adata, query)
        else:
            adata = query
        _string_group_categories(model.registry_)
        warn_if_few_encoder_genes(
            model.module.encoder_gene_mask.cpu().numpy(), query, model.module.gene_panel_min_fraction
        )
        _, _, torch_device = parse_device_args(accelerator=accelerator, devices=device, return_device="torch")
        model.to_device(torch_device)
        model.adata = adata
        model._fix_embedding_centres(adata, keep=True)  # the query's datasets are fixed as mapped
        _freeze_for_query(model.module, unfrozen, freeze_expression, freeze_dropout, freeze_batchnorm_encoder)
        return model

    @classmethod
    def from_pretrained(cls, adata: ad.AnnData, reference_model, **prepare_kwargs):
        """A model of your own data that starts from a pretrained reference's weights; train it next.

        The path for a study of your own, e.g. blood with :func:`sctrilemma.data.blood_reference_dir`: ``adata`` is
        mapped into the reference's genes as in :meth:`~sctrilemma.SCTrilemma.load_query_data` (``adata`` itself is not
        modified) and every weight is trainable, so that a few minutes of :meth:`~sctrilemma.SCTrilemma.train` fit the
        reference to your cells. It is ``load_query_data(adata, reference_model, unfrozen=True)`` without the
        reference's label classifier: training moves the embedding the classifier was fitted on, so transfer labels with
        the zero-shot model (:meth:`~sctrilemma.SCTrilemma.load_query_data`,
        :meth:`~sctrilemma.SCTrilemma.predict_labels`) or fit a classifier anew
        (:meth:`~sctrilemma.SCTrilemma.fit_label_classifier`).

        Parameters
        ----------
        adata
            Your cells with raw counts (any gene identifiers that overlap the reference's).
        reference_model
            A trained model (left unchanged) or the directory of a saved reference.
        **prepare_kwargs
            Passed to :meth:`~sctrilemma.SCTrilemma.prepare_query_anndata` (``layer``, ``donor_key``, ``dataset_key``,
            ``min_overlap``).

        Returns
        -------
        The model with the mapped data attached, ready for :meth:`~sctrilemma.SCTrilemma.train` (e.g.
        ``model.train(max_epochs=10_000, max_time="00:00:02:00")``).
        """
        model = cls.load_query_data(adata, reference_model, unfrozen=True, **prepare_kwargs)
        model.label_classifier_ = None
        return model

    def _nothing_to_train(self) -> bool:
        """Whether every parameter is frozen (a query loaded with the default freezing); logs why."""
        if any(parameter.requires_grad for parameter in self.module.parameters()):
            return False
        logger.warning(
            "Nothing to train: this query model's reference weights are frozen and a query adds no parameters, "
            "so it embeds zero-shot as it is. Pass `unfrozen=True` (or `freeze_expression=False`) to "
            "`load_query_data` to fine-tune."
        )
        return True


def _freeze_for_query(
    module: torch.nn.Module, unfrozen: bool, freeze_expression: bool, freeze_dropout: bool, freeze_batchnorm: bool
) -> None:
    """scArches-style freezing of a query model's module (see :meth:`ReferenceMixin.load_query_data`)."""
    gene_level = ("encoder.gene_embedding.", "encoder.expression_gate.", "decoder.gene_offset.")
    trainable = ("",) if unfrozen else () if freeze_expression else gene_level
    for name, parameter in module.named_parameters():
        parameter.requires_grad_(any(name.startswith(prefix) for prefix in trainable))
    if unfrozen:
        return
    for submodule in module.modules():
        if freeze_dropout and isinstance(submodule, torch.nn.Dropout):
            submodule.p = 0.0
        if freeze_dropout and isinstance(getattr(submodule, "dropout_rate", None), float):
            submodule.dropout_rate = 0.0  # attention-weight dropout
        if freeze_batchnorm and isinstance(submodule, torch.nn.modules.batchnorm._BatchNorm):
            submodule.momentum = 0.0


def _string_group_categories(registry: dict) -> None:
    """Make the donor/dataset categories strings, as :meth:`ReferenceMixin.prepare_query_anndata` writes them.

    A reference trained on numeric donor IDs would otherwise mix integer and string categories when
    the query's donors are appended.
    """
    setup_args = registry["setup_args"]
    for argument, field in (("donor_key", "donor"), ("dataset_key", "dataset")):
        if setup_args.get(argument) is None:
            continue
        state = registry["field_registries"][field]["state_registry"]
        state["categorical_mapping"] = np.asarray(state["categorical_mapping"]).astype(str).astype(object)


def _data_file_name(adata: ad.AnnData | MuData, prefix: str | None) -> str:
    """scvi-tools' file name for saved data: ``adata.h5ad``, or ``mdata.h5mu`` for MuData."""
    return f"{prefix or ''}{'mdata.h5mu' if hasattr(adata, 'mod') else 'adata.h5ad'}"


def _read_saved_data(directory: Path, prefix: str | None) -> ad.AnnData | MuData | None:
    """The data saved beside a reference with ``save_anndata=True``, if any."""
    if (directory / f"{prefix or ''}adata.h5ad").exists():
        return ad.read_h5ad(directory / f"{prefix or ''}adata.h5ad")
    if (directory / f"{prefix or ''}mdata.h5mu").exists():
        import mudata

        return mudata.read_h5mu(directory / f"{prefix or ''}mdata.h5mu")
    return None
