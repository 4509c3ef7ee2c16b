"""A Lightning data module streaming cells from a CELLxGENE Census / TileDB-SOMA experiment (via TileDB-SOMA-ML).

scvi-tools' :class:`~scvi.dataloaders.TileDBDataModule` yields scVI's batch, label and covariate tensors; SCTrilemma
needs each cell's donor and dataset codes under its own registry keys, the PB-Cond pseudo-bulk of every donor streamed
before training, cells with too few expressed genes left out and a new shuffle each epoch, so this module wraps
TileDB-SOMA-ML itself.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningDataModule
from scvi import REGISTRY_KEYS
from scvi.utils import dependencies
from torch.utils.data import DataLoader, IterableDataset

from sctrilemma._constants import SCT_REGISTRY_KEYS
from sctrilemma.data._census import (
    CENSUS_OBS_FILTER,
    DATASET_COLUMN,
    DONOR_COLUMN,
    GENE_ID_COLUMN,
    GENE_SYMBOL_COLUMN,
    PSEUDOBULK_CHUNK,
    PseudobulkTable,
    cached_pseudobulk,
    default_cache_dir,
    open_experiment,
    pseudobulk_cache_key,
    streamed_pseudobulk,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tiledbsoma_ml import ExperimentDataset

logger = logging.getLogger(__name__)

IO_BATCH_SIZE = 16384
SHUFFLE_CHUNK_SIZE = 64


class SomaBatches(IterableDataset):
    """Mini-batches of an :class:`tiledbsoma_ml.ExperimentDataset` as the model's tensor dictionaries.

    Runs in DataLoader workers; ``X`` becomes a dense float tensor and the donor/dataset columns the codes of the
    registry's categories, exactly as the in-memory AnnData path registers them.
    """

    def __init__(
        self,
        dataset: ExperimentDataset,
        donor_categories: np.ndarray,
        dataset_categories: np.ndarray,
        donor_column: str,
        dataset_column: str,
        min_expressed_genes: int = 0,
    ) -> None:
        self.dataset = dataset
        self.base_seed = int(dataset.seed)
        self.donor_categories = donor_categories
        self.dataset_categories = dataset_categories
        self.donor_column = donor_column
        self.dataset_column = dataset_column
        self.min_expressed_genes = min_expressed_genes

    def __len__(self) -> int:
        return len(self.dataset)

    def set_epoch(self, epoch: int) -> None:
        """New shuffle for ``epoch`` (the same on every rank).

        TileDB-SOMA-ML 0.1.0 records the epoch but never mixes it into the shuffle, so the seed is advanced here.
        """
        self.dataset.set_epoch(epoch)
        object.__setattr__(self.dataset, "seed", self.base_seed + epoch)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for X, obs in self.dataset:
            X = np.asarray(X.todense() if hasattr(X, "todense") else X, dtype=np.float32)
            keep = (X > 0).sum(axis=1) >= self.min_expressed_genes
            if not keep.all() and keep.any():  # same rule as the in-memory training split
                X, obs = X[keep], obs[keep]
            yield {
                REGISTRY_KEYS.X_KEY: torch.from_numpy(X),
                REGISTRY_KEYS.BATCH_KEY: torch.zeros(X.shape[0], 1),
                SCT_REGISTRY_KEYS.DONOR_KEY: self._codes(obs, self.donor_column, self.donor_categories),
                SCT_REGISTRY_KEYS.DATASET_KEY: self._codes(obs, self.dataset_column, self.dataset_categories),
                "soma_joinid": torch.as_tensor(obs["soma_joinid"].to_numpy(np.int64)),
            }

    @staticmethod
    def _codes(obs: pd.DataFrame, column: str, categories: np.ndarray) -> torch.Tensor:
        codes = pd.Index(categories).get_indexer(obs[column].astype(str))
        if (codes < 0).any():
            raise RuntimeError(
                f"A cell has {column}={obs[column].iloc[int(np.argmax(codes < 0))]!r}, unknown when the data module "
                "was set up; the experiment changed during training."
            )
        return torch.as_tensor(codes, dtype=torch.float32)[:, None]


class SomaDataModule(LightningDataModule):
    """Stream cells of a CELLxGENE Census (or any TileDB-SOMA experiment) for training :class:`~sctrilemma.SCTrilemma`.

    Cells are chosen by ``obs_value_filter`` (the paper's filter by default), shuffled in chunks and sharded across
    DDP ranks and DataLoader workers by TileDB-SOMA-ML; nothing is cached locally. The gene vocabulary is the
    experiment's ``var.feature_id`` in order (optionally narrowed by ``var_value_filter``). PB-Cond groups are
    ``(dataset_id, donor_id)``.

    Parameters
    ----------
    source
        A Census URI/path or open Census, or a SOMA experiment (see :func:`~sctrilemma.data.open_experiment`).
    organism
        Census organism.
    obs_value_filter
        SOMA value filter on ``obs``; ``None`` keeps every cell.
    var_value_filter
        SOMA value filter on ``var`` (e.g. ``"feature_id in [...]"``); ``None`` keeps every gene.
    measurement_name, layer_name
        Where the raw counts are.
    donor_column, dataset_column
        Obs columns naming donors and datasets.
    batch_size
        Cells per step and rank.
    num_workers
        DataLoader workers per rank (each reads its own shard).
    seed
        Shuffle seed; the same on all ranks so their shards stay disjoint.
    min_expressed_genes
        Cells with fewer expressed genes are left out of training batches.
    io_batch_size, shuffle_chunk_size
        Rows read per SOMA request and size of contiguous shuffle chunks (see :class:`tiledbsoma_ml.ExperimentDataset`).
    cache_dir
        Where pseudo-bulk profiles are cached; see :func:`~sctrilemma.data.default_cache_dir`.
    """

    @dependencies("tiledbsoma", "tiledbsoma_ml")
    def __init__(
        self,
        source,
        organism: str = "Homo sapiens",
        *,
        obs_value_filter: str | None = CENSUS_OBS_FILTER,
        var_value_filter: str | None = None,
        measurement_name: str = "RNA",
        layer_name: str = "raw",
        donor_column: str = DONOR_COLUMN,
        dataset_column: str = DATASET_COLUMN,
        batch_size: int = 256,
        num_workers: int = 0,
        seed: int = 0,
        min_expressed_genes: int = 5,
        io_batch_size: int = IO_BATCH_SIZE,
        shuffle_chunk_size: int = SHUFFLE_CHUNK_SIZE,
        cache_dir: str | Path | None = None,
    ) -> None:
        import tiledbsoma
        from tiledbsoma_ml._query_ids import QueryIDs
        from tiledbsoma_ml.x_locator import XLocator

        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.min_expressed_genes = min_expressed_genes
        self.io_batch_size = io_batch_size
        self.shuffle_chunk_size = shuffle_chunk_size
        self.donor_column = donor_column
        self.dataset_column = dataset_column
        self.cache_dir = default_cache_dir() if cache_dir is None else cache_dir
        experiment = open_experiment(source, organism)
        if measurement_name not in experiment.ms or layer_name not in experiment.ms[measurement_name].X:
            raise ValueError(
                f"The experiment at {experiment.uri} has no X layer {measurement_name}/{layer_name}; "
                "Census counts are in measurement 'RNA', layer 'raw'."
            )
        missing = {donor_column, dataset_column} - set(experiment.obs.keys())
        if missing:
            raise ValueError(f"obs of {experiment.uri} lacks {sorted(missing)}; pass `donor_column`/`dataset_column`.")
        try:
            with experiment.axis_query(
                measurement_name,
                obs_query=tiledbsoma.AxisQuery(value_filter=obs_value_filter),
                var_query=tiledbsoma.AxisQuery(value_filter=var_value_filter),
            ) as query:
                self.query_ids = QueryIDs.create(query)
                obs = query.obs(column_names=["soma_joinid", dataset_column, donor_column]).concat().to_pandas()
                var = query.var(column_names=["soma_joinid", GENE_ID_COLUMN, GENE_SYMBOL_COLUMN]).concat().to_pandas()
        except (tiledbsoma.SOMAError, ValueError) as error:
            raise ValueError(f"Reading {experiment.uri} with the filters failed: {error}") from error
        if obs.shape[0] == 0:
            raise ValueError(f"No cell of {experiment.uri} passes `obs_value_filter={obs_value_filter!r}`.")
        var = var.set_index("soma_joinid").loc[self.query_ids.var_joinids]
        self.x_locator = XLocator.create(experiment, measurement_name=measurement_name, layer_name=layer_name)
        self.gene_ids = var[GENE_ID_COLUMN].astype(str).to_numpy(dtype=object)
        self.gene_symbols = var[GENE_SYMBOL_COLUMN].astype(str).to_numpy(dtype=object)
        self.donor_categories = np.sort(obs[donor_column].astype(str).unique()).astype(object)
        self.dataset_categories = np.sort(obs[dataset_column].astype(str).unique()).astype(object)
        self.n_obs = int(obs.shape[0])
        self.n_vars = int(self.gene_ids.size)
        self.source_id = {
            "uri": experiment.uri,
            "measurement": measurement_name,
            "layer": layer_name,
            "obs_value_filter": obs_value_filter,
            "var_value_filter": var_value_filter,
            "groups": [dataset_column, donor_column],
        }
        self.train_batches: SomaBatches | None = None
        logger.info(
            "SOMA source %s: %d cells, %d genes, %d donors, %d datasets.",
            experiment.uri,
            self.n_obs,
            self.n_vars,
            self.donor_categories.size,
            self.dataset_categories.size,
        )

    # ------------------------------------------------------------------ registry (what setup_anndata would record)
    @property
    def registry(self) -> dict:
        """An scvi-tools registry equal to ``SCTrilemma.setup_anndata``'s for the same cells held in memory."""
        from collections import defaultdict

        import scvi

        def categorical(key: str, column: str, categories: np.ndarray) -> dict:
            return {
                "data_registry": {"attr_name": "obs", "attr_key": f"_scvi_{key}"},
                "state_registry": {"categorical_mapping": categories, "original_key": column},
                "summary_stats": {f"n_{key}": len(categories)},
            }

        return {
            "scvi_version": scvi.__version__,
            "model_name": "SCTrilemma",
            "setup_method_name": "setup_anndata",
            "setup_args": {"layer": None, "donor_key": self.donor_column, "dataset_key": self.dataset_column},
            "field_registries": defaultdict(
                dict,
                {
                    REGISTRY_KEYS.X_KEY: {
                        "data_registry": {"attr_name": "X", "attr_key": None},
                        "state_registry": {"n_obs": self.n_obs, "n_vars": self.n_vars, "column_names": self.gene_ids},
                        "summary_stats": {"n_vars": self.n_vars, "n_cells": self.n_obs},
                    },
                    REGISTRY_KEYS.BATCH_KEY: categorical("batch", "_scvi_batch", np.array([0])),
                    SCT_REGISTRY_KEYS.DONOR_KEY: categorical("donor", self.donor_column, self.donor_categories),
                    SCT_REGISTRY_KEYS.DATASET_KEY: categorical("dataset", self.dataset_column, self.dataset_categories),
                },
            ),
        }

    # ------------------------------------------------------------------ streams
    def experiment_dataset(
        self, *, shuffle: bool, batch_size: int, sparse: bool = False, io_batch_size: int | None = None
    ) -> ExperimentDataset:
        """The :class:`tiledbsoma_ml.ExperimentDataset` over the selected cells and genes."""
        from tiledbsoma_ml import ExperimentDataset

        return ExperimentDataset(
            x_locator=self.x_locator,
            query_ids=self.query_ids,
            obs_column_names=["soma_joinid", self.dataset_column, self.donor_column],
            batch_size=batch_size,
            io_batch_size=self.io_batch_size if io_batch_size is None else io_batch_size,
            shuffle=shuffle,
            shuffle_chunk_size=self.shuffle_chunk_size,
            seed=self.seed,
            return_sparse_X=sparse,
        )

    def batches(
        self, *, shuffle: bool, batch_size: int, min_expressed_genes: int = 0, io_batch_size: int | None = None
    ) -> SomaBatches:
        """Tensor mini-batches over all selected cells (one process; DDP sharding is set in ``setup``)."""
        dataset = self.experiment_dataset(shuffle=shuffle, batch_size=batch_size, io_batch_size=io_batch_size)
        _set_partition(dataset, rank=0, world_size=1)
        return SomaBatches(
            dataset,
            self.donor_categories,
            self.dataset_categories,
            self.donor_column,
            self.dataset_column,
            min_expressed_genes,
        )

    def setup(self, stage: str | None = None) -> None:
        """Shard the shuffled stream by the trainer's global rank (also across nodes)."""
        self.train_batches = self.batches(
            shuffle=True, batch_size=self.batch_size, min_expressed_genes=self.min_expressed_genes
        )
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            # TileDB-SOMA-ML reads LOCAL_RANK under Lightning, which repeats shards on every node.
            _set_partition(self.train_batches.dataset, rank=trainer.global_rank, world_size=trainer.world_size)

    def set_epoch(self, epoch: int) -> None:
        """Called at the start of every epoch (by the model's training callback) for a new shuffle."""
        if self.train_batches is not None:
            self.train_batches.set_epoch(epoch)

    def train_dataloader(self) -> DataLoader:
        """Shuffled, sharded mini-batches of tensors."""
        if self.train_batches is None:
            self.setup("fit")
        return _loader(self.train_batches, self.num_workers)

    def inference_dataloader(self, batch_size: int = 1024) -> DataLoader:
        """All selected cells in experiment order (``soma_joinid`` ascending), not shuffled.

        Reads ``4 * batch_size`` cells per SOMA request, so memory stays flat in the number of cells.
        """
        batches = self.batches(shuffle=False, batch_size=batch_size, io_batch_size=4 * batch_size)
        return _loader(batches, self.num_workers)

    # ------------------------------------------------------------------ PB-Cond
    def pseudobulk(self, progress_bar: bool = True) -> PseudobulkTable:
        """Pseudo-bulk profiles per ``(dataset, donor)`` from one streamed pass, cached on disk.

        The cache file name hashes the experiment URI, layer, filters and gene vocabulary.
        """
        key = pseudobulk_cache_key(self.source_id, self.gene_ids)
        cache_file = Path(self.cache_dir) / f"pseudobulk_{key}.npz"

        def compute() -> PseudobulkTable:
            dataset = self.experiment_dataset(
                shuffle=False, batch_size=PSEUDOBULK_CHUNK, sparse=True, io_batch_size=4 * PSEUDOBULK_CHUNK
            )
            _set_partition(dataset, rank=0, world_size=1)
            total = -(-self.n_obs // PSEUDOBULK_CHUNK)
            return streamed_pseudobulk(
                dataset,
                self.n_vars,
                dataset_column=self.dataset_column,
                donor_column=self.donor_column,
                progress_bar=progress_bar,
                total=total,
            )

        return cached_pseudobulk(cache_file, compute)


def _set_partition(dataset: ExperimentDataset, *, rank: int, world_size: int) -> None:
    # ExperimentDataset is a frozen attrs class that reads the rank from the environment at construction.
    object.__setattr__(dataset, "rank", int(rank))
    object.__setattr__(dataset, "world_size", int(world_size))


def _loader(batches: SomaBatches, num_workers: int) -> DataLoader:
    from tiledbsoma_ml import experiment_dataloader

    # No persistent workers: each epoch's workers must copy the dataset after `set_epoch` to get a new shuffle.
    return experiment_dataloader(batches, num_workers=num_workers, persistent_workers=False)
