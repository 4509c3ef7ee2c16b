"""CELLxGENE Census / TileDB-SOMA sources: opening, the paper's cell filter, a local mini-census, streamed pseudo-bulk.

Everything here imports ``tiledbsoma`` lazily, so ``import sctrilemma`` works without the ``census`` extra.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scvi.utils import dependencies, track

from sctrilemma._normalize import TARGET_SUM
from sctrilemma.data._example import load_example

if TYPE_CHECKING:
    import tiledbsoma

logger = logging.getLogger(__name__)

#: The paper's Census cell filter (the organism is chosen by the experiment).
CENSUS_OBS_FILTER = "is_primary_data == True and suspension_type != 'na'"
DONOR_COLUMN = "donor_id"
DATASET_COLUMN = "dataset_id"
GENE_ID_COLUMN = "feature_id"
GENE_SYMBOL_COLUMN = "feature_name"
EXAMPLE_DATASETS = {"kang2018-ctrl-a": ("1015", "1016", "1244"), "kang2018-ctrl-b": ("1256", "1488")}
N_EXAMPLE_FILTERED = 40  # cells per filter column that the paper's filter must drop from the mini-census
PSEUDOBULK_CHUNK = 1024


def organism_key(organism: str) -> str:
    """``"Homo sapiens"`` -> ``"homo_sapiens"`` (the Census experiment name)."""
    return organism.strip().lower().replace(" ", "_")


@dependencies("tiledbsoma")
def open_experiment(source, organism: str = "Homo sapiens") -> tiledbsoma.Experiment:
    """Open the TileDB-SOMA experiment of a Census (or any experiment) for reading.

    Parameters
    ----------
    source
        A :class:`tiledbsoma.Experiment`; an open Census (``cellxgene_census.open_soma()``); or the URI/path of a
        Census root (with ``census_data/<organism>``) or of an experiment.
    organism
        Census organism, e.g. ``"Homo sapiens"``; ignored when ``source`` is an experiment.

    Returns
    -------
    The open experiment. Close it (or use it in a ``with`` block) when done.

    Raises
    ------
    ValueError
        If the URI is neither a Census root nor a SOMA experiment, or the organism is missing.
    """
    import tiledbsoma

    if isinstance(source, tiledbsoma.Experiment):
        return source
    if isinstance(source, str | os.PathLike):
        uri = str(source)
        try:
            kind = tiledbsoma.open(uri)
        except (tiledbsoma.DoesNotExistError, tiledbsoma.SOMAError) as error:
            raise ValueError(
                f"Cannot open a TileDB-SOMA object at {uri!r} ({error}). Pass the URI of a Census root or of a "
                "SOMA experiment (e.g. one built with `sctrilemma.data.build_example_census`)."
            ) from error
        if isinstance(kind, tiledbsoma.Experiment):
            return kind
        source = kind
    if not isinstance(source, tiledbsoma.Collection) or "census_data" not in source:
        raise ValueError(
            f"Expected a Census (a collection with 'census_data') or a SOMA experiment, got {type(source).__name__}."
        )
    name = organism_key(organism)
    if name not in source["census_data"]:
        raise ValueError(f"Organism {organism!r} not in this Census (has: {sorted(source['census_data'].keys())}).")
    return source["census_data"][name]


@dependencies("tiledbsoma")
def build_example_census(path: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write the shipped example (:func:`~sctrilemma.data.load_example`) as a local mini-Census.

    Same layout and columns as the CELLxGENE Census: ``census_data/homo_sapiens`` with measurement ``RNA``, layer
    ``raw``, obs ``dataset_id``/``donor_id``/``cell_type``/``assay``/``suspension_type``/``is_primary_data`` and var
    ``feature_id`` (Ensembl) / ``feature_name`` (symbol). Donors 1015, 1016, 1244 form dataset ``kang2018-ctrl-a``
    and donors 1256, 1488 ``kang2018-ctrl-b``. 40 cells are marked ``is_primary_data=False`` and 40 others
    ``suspension_type='na'``, so the paper's filter keeps 2,920 of 3,000 cells. Open it with
    ``cellxgene_census.open_soma(uri=str(path))``; nothing is downloaded.

    Parameters
    ----------
    path
        Directory to create.
    overwrite
        Replace an existing directory.

    Returns
    -------
    ``path``.
    """
    import shutil

    import tiledbsoma
    import tiledbsoma.io

    path = Path(path)
    if path.exists():
        if not overwrite:
            raise FileExistsError(f"{path} exists; pass `overwrite=True` to replace it.")
        shutil.rmtree(path)
    adata = example_census_anndata()
    with tiledbsoma.Collection.create(str(path)) as root:
        census_data = root.add_new_collection("census_data")
        experiment_uri = str(path / "census_data" / "homo_sapiens")
        tiledbsoma.io.from_anndata(experiment_uri, adata, measurement_name="RNA", X_layer_name="raw")
        with tiledbsoma.Experiment.open(experiment_uri) as experiment:
            census_data.set("homo_sapiens", experiment, use_relative_uri=True)
    return path


def example_census_anndata(n_copies: int = 1):
    """The example data with Census obs/var columns (used by :func:`build_example_census` and the benchmarks).

    ``n_copies > 1`` repeats the cells (obs names suffixed ``-1``, ``-2``...) to make larger data of the same kind.
    """
    import anndata as ad

    adata = load_example()
    obs = pd.DataFrame(index=adata.obs_names)
    donor = adata.obs["donor"].astype(str).to_numpy()
    obs[DATASET_COLUMN] = next(iter(EXAMPLE_DATASETS))
    for dataset, donors in EXAMPLE_DATASETS.items():
        obs.loc[np.isin(donor, donors), DATASET_COLUMN] = dataset
    obs[DONOR_COLUMN] = donor
    obs["cell_type"] = adata.obs["cell_type"].astype(str).to_numpy()
    obs["assay"] = "10x Chromium"
    obs["suspension_type"] = "cell"
    obs["is_primary_data"] = True
    dropped = np.random.default_rng(0).choice(adata.n_obs, 2 * N_EXAMPLE_FILTERED, replace=False)
    obs.iloc[dropped[:N_EXAMPLE_FILTERED], obs.columns.get_loc("is_primary_data")] = False
    obs.iloc[dropped[N_EXAMPLE_FILTERED:], obs.columns.get_loc("suspension_type")] = "na"
    var = pd.DataFrame(index=adata.var_names.copy())
    var[GENE_ID_COLUMN] = adata.var_names.to_numpy()
    var[GENE_SYMBOL_COLUMN] = adata.var["gene_symbol"].astype(str).to_numpy()
    X = sp.csr_matrix(adata.X, dtype=np.float32)
    if n_copies > 1:
        X = sp.vstack([X] * n_copies, format="csr")
        obs = pd.concat([obs.set_axis(obs.index + f"-{i}") for i in range(n_copies)])
    return ad.AnnData(X=X, obs=obs, var=var)


# ---------------------------------------------------------------------- streamed pseudo-bulk
@dataclass(frozen=True)
class PseudobulkTable:
    """Pseudo-bulk profiles of dataset-donor groups computed from a SOMA source.

    Attributes
    ----------
    profiles
        ``(n_groups, n_genes)`` ``log1p`` mean CP10K profiles (as :func:`~sctrilemma.data.pseudobulk_profiles`).
    datasets, donors
        ``(n_groups,)`` names of each group's dataset and donor.
    n_cells
        ``(n_groups,)`` cells per group.
    """

    profiles: np.ndarray
    datasets: np.ndarray
    donors: np.ndarray
    n_cells: np.ndarray


def default_cache_dir() -> Path:
    """``$SCTRILEMMA_CACHE_DIR``, else ``$XDG_CACHE_HOME/sctrilemma`` (``~/.cache/sctrilemma``)."""
    if os.environ.get("SCTRILEMMA_CACHE_DIR"):
        return Path(os.environ["SCTRILEMMA_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sctrilemma"


def pseudobulk_cache_key(source_id: dict, genes: np.ndarray) -> str:
    """Hash of the source description (URI, layer, filters) and the gene vocabulary."""
    digest = hashlib.sha256(json.dumps(source_id, sort_keys=True).encode())
    digest.update("\n".join(map(str, genes)).encode())
    return digest.hexdigest()[:24]


def streamed_pseudobulk(
    batches,
    n_genes: int,
    *,
    dataset_column: str = DATASET_COLUMN,
    donor_column: str = DONOR_COLUMN,
    progress_bar: bool = True,
    total: int | None = None,
) -> PseudobulkTable:
    """Pseudo-bulk profiles per ``(dataset, donor)`` in one pass over ``(X, obs)`` row batches.

    Memory holds one batch and the ``(n_groups, n_genes)`` sums, whatever the number of cells.

    Parameters
    ----------
    batches
        Iterable of ``(X, obs)``: raw counts ``(b, n_genes)`` (CSR or dense) and the rows' obs with both columns.
    n_genes
        Vocabulary size.
    dataset_column, donor_column
        Obs columns defining groups.
    progress_bar
        Show progress.
    total
        Number of batches, for the progress bar.
    """
    index: dict[tuple[str, str], int] = {}
    sums: list[np.ndarray] = []
    counts: list[int] = []
    for X, obs in track(batches, description="Pseudo-bulk pass", disable=not progress_bar, total=total, style="tqdm"):
        block = sp.csr_matrix(X, dtype=np.float64)
        if block.shape[1] != n_genes:
            raise ValueError(f"A batch has {block.shape[1]} genes, expected {n_genes}.")
        pairs = pd.MultiIndex.from_arrays([obs[dataset_column].astype(str), obs[donor_column].astype(str)])
        local, unique_pairs = pd.factorize(pairs)
        for key in unique_pairs:
            if key not in index:
                index[key] = len(index)
                sums.append(np.zeros(n_genes))
                counts.append(0)
        library = np.maximum(np.asarray(block.sum(axis=1)).ravel(), 1.0)
        # One sparse product sums the normalised rows of each group present in the batch.
        indicator = sp.csr_matrix(
            (TARGET_SUM / library, (local, np.arange(block.shape[0]))), shape=(len(unique_pairs), block.shape[0])
        )
        group_sums = np.asarray((indicator @ block).todense())
        sizes = np.bincount(local, minlength=len(unique_pairs))
        for row, key in enumerate(unique_pairs):
            sums[index[key]] += group_sums[row]
            counts[index[key]] += int(sizes[row])
    if not index:
        raise ValueError("The SOMA query matched no cells; check `obs_value_filter`.")
    names = np.array(list(index), dtype=object)
    n_cells = np.asarray(counts, dtype=np.int64)
    profiles = np.log1p(np.vstack(sums) / n_cells[:, None])
    return PseudobulkTable(profiles, names[:, 0].astype(str), names[:, 1].astype(str), n_cells)


def cached_pseudobulk(cache_file: Path, compute) -> PseudobulkTable:
    """Load ``cache_file`` (``.npz``) or run ``compute()`` and write it atomically."""
    if cache_file.exists():
        with np.load(cache_file, allow_pickle=False) as stored:
            logger.info("Pseudo-bulk profiles read from the cache %s.", cache_file)
            return PseudobulkTable(
                stored["profiles"], stored["datasets"].astype(str), stored["donors"].astype(str), stored["n_cells"]
            )
    table = compute()
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    partial = cache_file.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(
        partial,
        profiles=table.profiles,
        datasets=table.datasets.astype(str),
        donors=table.donors.astype(str),
        n_cells=table.n_cells,
    )
    os.replace(partial, cache_file)
    logger.info("Pseudo-bulk profiles of %d groups cached in %s.", table.profiles.shape[0], cache_file)
    return table


def group_codes(
    table: PseudobulkTable, dataset_categories: np.ndarray, donor_categories: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """Group keys ``dataset_code * stride + donor_code`` (sorted), the stride, and the matching profiles and sizes."""
    dataset_code = pd.Index(dataset_categories).get_indexer(table.datasets)
    donor_code = pd.Index(donor_categories).get_indexer(table.donors)
    if (dataset_code < 0).any() or (donor_code < 0).any():
        raise ValueError("The pseudo-bulk table has groups outside the data's categories; clear the cache file.")
    stride = len(donor_categories)
    keys = dataset_code.astype(np.int64) * stride + donor_code
    order = np.argsort(keys)
    return keys[order], stride, table.profiles[order], np.asarray(table.n_cells)[order]
