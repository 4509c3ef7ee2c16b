"""The k-means partitions behind a query's NMI: each of the scorer's 20 single starts, grouped by partition.

The scorer (``sctrilemma.metrics.nmi_ari_kmeans``) averages the NMI of 20 k-means runs with one k-means++ start
each (seeds ``seed`` to ``seed + 19``). This prints, for saved query embeddings, each distinct partition those starts
reach, how many starts reach it, its NMI and inertia, and its cells by type; then, in the lowest-inertia partition,
the mean counts of T-cell and cytotoxic markers in the CD4 T cells placed with most NK cells, in the other CD4 T cells
and in the NK cells.

Usage (from the repository root, after ``../../3dec_query_partition/train.py SEED OUT``):
``python benchmarks/results/zero_shot/5dec_crop_size/kmeans_modes.py OUT SEED [SEED ...]``; reads
``OUT/query_z_SEED.npy`` and ``OUT/query_pca.npy`` and scores each with that seed's starts.
"""

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

sys.path.insert(0, "scripts")
from train_blood_reference import load_blood_data, query_cells

warnings.filterwarnings("ignore")
N_STARTS = 20
MARKERS = ["CD3D", "CD3E", "IL7R", "LDHB", "CD8A", "NKG7", "GNLY", "GZMB", "PRF1", "CCL5", "KLRD1"]


def scorer_starts(embedding: np.ndarray, n_clusters: int, seed: int) -> list[KMeans]:
    """The scorer's 20 k-means runs, one k-means++ start each (seeds ``seed`` to ``seed + 19``)."""
    return [
        KMeans(n_clusters=n_clusters, n_init=1, random_state=seed + start).fit(embedding) for start in range(N_STARTS)
    ]


def partitions(runs: list[KMeans], types: np.ndarray) -> list[tuple[int, float, float, pd.DataFrame]]:
    """Each distinct partition of the runs: (starts, NMI, inertia, cells by cluster and type)."""
    found: dict[tuple, list] = {}
    for kmeans in runs:
        table = pd.crosstab(kmeans.labels_, types)
        key = tuple(sorted(map(tuple, table.to_numpy())))
        nmi = normalized_mutual_info_score(types, kmeans.labels_)
        found.setdefault(key, []).append((nmi, kmeans.inertia_))
    columns = sorted(set(types))
    return [
        (len(found_runs), found_runs[0][0], found_runs[0][1], pd.DataFrame(list(key), columns=columns))
        for key, found_runs in sorted(found.items(), key=lambda item: -len(item[1]))
    ]


def markers_of_t_cells_with_nk(query, clusters: np.ndarray) -> pd.DataFrame:
    """Mean marker counts of CD4 T cells in the partition's NK cluster, of other CD4 T cells and of NK cells."""
    types = query.obs["cell_type"].astype(str).to_numpy()
    nk_cluster = pd.crosstab(clusters, types)["NK cells"].idxmax()
    t_cells = types == "CD4 T cells"
    groups = {
        "CD4 T cells with the NK cells": t_cells & (clusters == nk_cluster),
        "other CD4 T cells": t_cells & (clusters != nk_cluster),
        "NK cells": types == "NK cells",
    }
    symbols = query.var["gene_symbol"].astype(str).to_numpy()
    columns = [np.flatnonzero(symbols == gene)[0] for gene in MARKERS]
    counts = query.X.tocsr()[:, columns].toarray()
    depth = np.asarray(query.X.sum(axis=1)).ravel()
    rows = {
        name: [int(cells.sum()), float(np.median(depth[cells]))] + list(counts[cells].mean(axis=0))
        for name, cells in groups.items()
    }
    return pd.DataFrame.from_dict(rows, orient="index", columns=["cells", "median counts"] + MARKERS).round(2)


def main() -> None:
    out, seeds = Path(sys.argv[1]), [int(s) for s in sys.argv[2:]]
    query = query_cells(load_blood_data("../shared/data"))
    types = query.obs["cell_type"].astype(str).to_numpy()
    embeddings = [(f"query_z_{seed}", seed) for seed in seeds] + [("query_pca", seed) for seed in seeds]
    for name, seed in embeddings:
        runs = scorer_starts(np.load(out / f"{name}.npy"), len(set(types)), seed)
        found = partitions(runs, types)
        mean_nmi = sum(n * nmi for n, nmi, _, _ in found) / N_STARTS
        print(f"== {name}, starts of seed {seed}: mean NMI {mean_nmi:.3f}")
        for n_starts, nmi, inertia, table in found:
            print(f"{n_starts} starts: NMI {nmi:.3f}, inertia {inertia:.1f}\n{table.to_string()}")
        lowest_inertia = min(runs, key=lambda kmeans: kmeans.inertia_)
        markers = markers_of_t_cells_with_nk(query, lowest_inertia.labels_)
        print(f"mean counts in the lowest-inertia partition\n{markers.to_string()}")


if __name__ == "__main__":
    main()
