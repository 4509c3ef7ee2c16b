"""Zilionis as trilemma.py trains it (with the stop): how much of the embedding's variance the cell types explain.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python benchmarks/results/quality/zilionis_seed3/embedding_spread.py 3 4

Per seed: the steps, the k-means NMI and ARI averaged over 20 single starts (as the Scorecard's ``nmi_ari_kmeans``,
on all cells), the lowest-inertia partition against the cell types (tumour neutrophil subsets apart), the share of
the embedding's variance between the types' centroids, its participation ratio (the effective number of axes), and
the variance share and type R² of its first principal axes, and the k-means NMI on its first 5, 10 and 20. The
schedule follows the clock (``max_time``), so a rerun at another load can stop at another step.
"""

import sys
import warnings

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.decomposition import PCA
from sklearn.linear_model import LinearRegression
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from zilionis import LABEL_KEY, between_share, kmeans_nmi, load, train

warnings.filterwarnings("ignore")
adata = load()
labels = adata.obs[LABEL_KEY].astype(str).to_numpy()
subsets = np.where(labels == "Neutrophils", adata.obs["Minor_subset"].astype(str).to_numpy(), labels)
types = pd.get_dummies(labels).to_numpy(dtype=float)
for seed in (int(s) for s in sys.argv[1:]):
    model, facts = train(adata, seed)
    z = model.get_latent_representation()
    starts = [KMeans(4, n_init=1, random_state=seed + r).fit(z) for r in range(20)]
    nmi = np.mean([normalized_mutual_info_score(labels, s.labels_) for s in starts])
    ari = np.mean([adjusted_rand_score(labels, s.labels_) for s in starts])
    print(f"seed {seed}: {facts['steps']} steps, k-means NMI {nmi:.3f}, ARI {ari:.3f} (all cells, 20 starts)")
    print(pd.crosstab(subsets, min(starts, key=lambda s: s.inertia_).labels_).to_string())
    eigen = np.linalg.eigvalsh(np.cov((z - z.mean(0)).T))
    print(
        f"types' share of the variance {between_share(z, labels):.3f}, "
        f"participation ratio {eigen.sum() ** 2 / (eigen**2).sum():.1f}"
    )
    on_axes = [kmeans_nmi(PCA(n_axes).fit_transform(z), labels, seed) for n_axes in (5, 10, 20)]
    print("k-means NMI on the first 5, 10 and 20 principal axes: " + ", ".join(f"{v:.3f}" for v in on_axes))
    axes = PCA(4).fit(z)
    scores = axes.transform(z)
    print(
        "first axes: variance share "
        + ", ".join(f"{v:.3f}" for v in axes.explained_variance_ratio_)
        + "; type R² "
        + ", ".join(f"{LinearRegression().fit(types, scores[:, i]).score(types, scores[:, i]):.2f}" for i in range(4))
    )
