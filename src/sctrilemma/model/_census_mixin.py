"""Training from, and embedding of, a streamed CELLxGENE Census / TileDB-SOMA source (Lightning DDP ready)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from scvi.model.base import UnsupervisedTrainingMixin

from sctrilemma.data._census import CENSUS_OBS_FILTER, group_codes
from sctrilemma.model._presets import plan_arguments, trainer_arguments, training_length

if TYPE_CHECKING:
    from pathlib import Path

    from sctrilemma.data._soma_datamodule import SomaDataModule

logger = logging.getLogger(__name__)


class _NewShufflePerEpoch(Callback):
    """Tell the SOMA data module the epoch before its loader is iterated (Lightning only does this for samplers)."""

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        trainer.datamodule.set_epoch(trainer.current_epoch)


class CensusMixin:
    """:meth:`~sctrilemma.SCTrilemma.from_census` / :meth:`~sctrilemma.SCTrilemma.from_datamodule` and SOMA embedding for :class:`~sctrilemma.SCTrilemma`."""

    @classmethod
    def from_census(
        cls,
        source,
        organism: str = "Homo sapiens",
        *,
        obs_value_filter: str | None = CENSUS_OBS_FILTER,
        var_value_filter: str | None = None,
        batch_size: int = 256,
        num_workers: int = 0,
        seed: int = 0,
        cache_dir: str | Path | None = None,
        datamodule_kwargs: dict | None = None,
        **model_kwargs,
    ):
        """An untrained model bound to cells streamed from a Census (or any TileDB-SOMA experiment).

        Train it with :meth:`train` (``strategy``, ``devices``, ``num_nodes`` go to Lightning), then :meth:`save` it
        as a normal reference. The gene vocabulary is the experiment's ``var.feature_id`` in order, and PB-Cond
        groups are ``(dataset_id, donor_id)``.

        Parameters
        ----------
        source
            A Census URI/path or open Census (``cellxgene_census.open_soma()``), or a SOMA experiment.
        organism
            Census organism.
        obs_value_filter
            Cells to train on; the paper's ``is_primary_data == True and suspension_type != 'na'`` by default.
        var_value_filter
            Genes to model; all by default.
        batch_size
            Cells per step and device.
        num_workers
            DataLoader workers per device.
        seed
            Shuffle seed (identical on all ranks).
        cache_dir
            Where the pseudo-bulk profiles are cached.
        datamodule_kwargs
            Other :class:`~sctrilemma.data.SomaDataModule` arguments (``min_expressed_genes``, ``io_batch_size``...).
        **model_kwargs
            :class:`~sctrilemma.SCTrilemma` arguments (``preset``, ``n_hidden``...).

        Examples
        --------
        >>> census = cellxgene_census.open_soma(census_version="stable")
        >>> model = sctrilemma.SCTrilemma.from_census(census, preset="paper")
        >>> model.train(max_epochs=1, accelerator="gpu", devices=4, strategy="ddp")
        >>> model.save("census_reference/")
        """
        from sctrilemma.data._soma_datamodule import SomaDataModule

        datamodule = SomaDataModule(
            source,
            organism,
            obs_value_filter=obs_value_filter,
            var_value_filter=var_value_filter,
            batch_size=batch_size,
            num_workers=num_workers,
            seed=seed,
            cache_dir=cache_dir,
            **(datamodule_kwargs or {}),
        )
        return cls.from_datamodule(datamodule, **model_kwargs)

    @classmethod
    def from_datamodule(cls, datamodule: SomaDataModule, **model_kwargs):
        """An untrained model bound to a :class:`~sctrilemma.data.SomaDataModule` (see :meth:`~sctrilemma.SCTrilemma.from_census`)."""
        model = cls(None, registry=datamodule.registry, **model_kwargs)
        model.gene_names_ = np.asarray(datamodule.gene_ids, dtype=object)
        model.gene_symbols_ = np.asarray(datamodule.gene_symbols, dtype=object)
        model._datamodule = datamodule
        return model

    @property
    def datamodule(self) -> SomaDataModule | None:
        """The streamed source the model trains on (``None`` for AnnData-backed models)."""
        return self.__dict__.get("_datamodule")

    def _train_streamed(
        self,
        max_epochs: int | None,
        max_steps: int | None,
        accelerator: str,
        devices,
        plan_kwargs: dict | None,
        recipe: dict,
        trainer_kwargs: dict,
    ) -> None:
        """Train on the bound data module with the preset's recipe; ``recipe`` is ``trainer_arguments``' keywords."""
        datamodule = self.datamodule
        self.module.train()
        if trainer_kwargs.get("sync_batchnorm") and not recipe["uses_cuda"]:
            raise ValueError(
                "`sync_batchnorm=True` converts BatchNorm to torch.nn.SyncBatchNorm, which runs only on GPU. Leave it "
                "out: sctrilemma's posterior BatchNorm already all-reduces its batch statistics across DDP ranks."
            )
        if self.module.prior is not None:
            self._set_source_codes(datamodule)
        max_epochs, max_steps = training_length(self._preset, datamodule.n_obs, max_epochs, max_steps)
        trainer_kwargs = trainer_arguments(self._preset, trainer_kwargs, has_validation_cells=False, **recipe)
        if max_steps is not None:
            trainer_kwargs["max_steps"] = max_steps
            max_epochs = max_steps  # every epoch has at least one step; max_steps stops training
        trainer_kwargs["callbacks"] = [*trainer_kwargs.get("callbacks", []), _NewShufflePerEpoch()]
        plan_kwargs = plan_arguments(self._preset, plan_kwargs)
        # SCTrilemma.train's AnnData split does not apply: call the scvi-tools mixin directly.
        UnsupervisedTrainingMixin.train(
            self,
            max_epochs=max_epochs,
            accelerator=accelerator,
            devices=devices,
            datamodule=datamodule,
            plan_kwargs=plan_kwargs,
            **trainer_kwargs,
        )

    def _set_source_codes(self, datamodule: SomaDataModule) -> None:
        """Give the module the PB-Cond codes of a SOMA source's dataset-donor groups (one streamed pass)."""
        table = datamodule.pseudobulk()
        keys, stride, profiles, n_cells = group_codes(table, datamodule.dataset_categories, datamodule.donor_categories)
        self._set_module_codes(self._codes_of_profiles(profiles), keys, stride, n_cells)

    @torch.inference_mode()
    def get_latent_representation_soma(
        self,
        source=None,
        organism: str = "Homo sapiens",
        obs_value_filter: str | None = CENSUS_OBS_FILTER,
        batch_size: int = 1024,
        num_workers: int = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Embed the cells of a SOMA source in streamed chunks; memory does not grow with the number of cells.

        Parameters
        ----------
        source
            Census/experiment (as in :meth:`~sctrilemma.SCTrilemma.from_census`); the training source when ``None``.
        organism, obs_value_filter
            Which cells.
        batch_size
            Cells per chunk.
        num_workers
            DataLoader workers.

        Returns
        -------
        ``soma_joinid`` ``(n_cells,)`` and embeddings ``(n_cells, n_hidden)``, in experiment order.

        Raises
        ------
        ValueError
            If the source's genes are not the model's vocabulary.
        """
        from sctrilemma.data._soma_datamodule import SomaDataModule

        self._check_if_trained(warn=False)
        if source is None and self.datamodule is None:
            raise ValueError("Pass `source`: this model was not trained from a SOMA source.")
        datamodule = self.datamodule if source is None else None
        if datamodule is None or obs_value_filter != datamodule.source_id["obs_value_filter"]:
            datamodule = SomaDataModule(
                source if source is not None else self.datamodule.x_locator.uri,
                organism,
                obs_value_filter=obs_value_filter,
                num_workers=num_workers,
            )
        if not np.array_equal(datamodule.gene_ids, self.gene_names_):
            raise ValueError(
                f"The source has {datamodule.n_vars} genes, not the model's {len(self.gene_names_)} in the same "
                "order. For other genes read the cells with `cellxgene_census.get_anndata` and embed them with "
                "`SCTrilemma.load_query_data`."
            )
        centred = self._centres_embedding()
        if centred:  # the prior means of this source's datasets
            self._set_source_codes(datamodule)
            shift_of = self._embedding_shifts()
        self.module.eval()
        joinids, latents = [], []
        for tensors in datamodule.inference_dataloader(batch_size=batch_size):
            outputs = self.module.inference(**self.module._get_inference_input(tensors))
            latent = outputs["qz"].loc.float()
            if centred:
                latent = latent - shift_of(tensors)
            latents.append(latent.cpu().numpy())
            joinids.append(tensors["soma_joinid"].numpy())
        if not latents:
            return np.zeros(0, dtype=np.int64), np.zeros((0, self.module.n_hidden), dtype=np.float32)
        return np.concatenate(joinids), np.concatenate(latents)
