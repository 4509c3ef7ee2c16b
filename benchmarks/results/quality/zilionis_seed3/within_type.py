"""Zilionis as trilemma.py trains it (with the stop): what the embedding's variation within each cell type follows.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python benchmarks/results/quality/zilionis_seed3/within_type.py 3 5

Per seed: the steps and k-means NMI (20 single starts, all cells), the types' share of the embedding's variance, and
the share of the variation within the types (each cell less its type's centroid) that each covariate explains
linearly (R² of a least-squares fit on the covariate's value or one-hot columns, centred within each type): the
cell's log counts, log detected genes, mitochondrial percentage, mouse, library, library batch and minor subset (the
study's own finer labels). Then the first three principal axes of the within-type variation: their share of it, each
covariate's R² on them, and the genes whose log-normalised expression follows each axis most closely (Spearman,
over all cells, after removing each type's mean). The schedule follows the clock (``max_time``), so a rerun at
another load can stop at another step.
"""

import sys
import warnings

import numpy as np
import pandas as pd
from scipy.stats import rankdata
from sklearn.decomposition import PCA
from zilionis import LABEL_KEY, between_share, centred_within, kmeans_nmi, load, train

warnings.filterwarnings("ignore")


def explained(target: np.ndarray, covariate: np.ndarray, labels: np.ndarray) -> float:
    """The share of ``target``'s within-type variance that ``covariate`` (cells × columns) explains, within types."""
    design = centred_within(covariate, labels)
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    return float(1 - ((target - design @ coef) ** 2).sum() / (target**2).sum())


adata = load()
labels = adata.obs[LABEL_KEY].astype(str).to_numpy()
counts = adata.X.toarray() if hasattr(adata.X, "toarray") else np.asarray(adata.X)
covariates = {
    "log counts": np.log1p(counts.sum(1))[:, None],
    "log genes": np.log1p((counts > 0).sum(1))[:, None],
    "mito %": adata.obs["Percent_counts_from_mitochondrial_genes"].to_numpy(float)[:, None],
}
for column in ("Animal", "Library", "Library_prep_batch", "Minor_subset"):
    covariates[column] = pd.get_dummies(adata.obs[column].astype(str)).to_numpy(float)
expressed = counts.sum(0) > 0
logged = np.log1p(counts[:, expressed] / counts.sum(1, keepdims=True) * 1e4)
gene_ranks = centred_within(np.apply_along_axis(rankdata, 0, centred_within(logged, labels)), labels)
genes = adata.var_names[expressed]

for seed in (int(s) for s in sys.argv[1:]):
    model, facts = train(adata, seed)
    z = model.get_latent_representation()
    within = centred_within(z, labels)
    print(
        f"seed {seed}: {facts['steps']} steps, k-means NMI {kmeans_nmi(z, labels, seed):.3f}, "
        f"types' share of the variance {between_share(z, labels):.3f}"
    )
    print(
        "  within-type variation explained: "
        + ", ".join(f"{name} {explained(within, value, labels):.3f}" for name, value in covariates.items())
    )
    axes = PCA(3).fit(within)
    scores = axes.transform(within)
    for i in range(3):
        axis = scores[:, i : i + 1]
        ranked = rankdata(axis[:, 0]) - (axis.shape[0] + 1) / 2
        rho = (gene_ranks * ranked[:, None]).sum(0) / (np.sqrt((gene_ranks**2).sum(0) * (ranked**2).sum()) + 1e-12)
        top = np.argsort(-np.abs(rho))[:8]
        print(
            f"  axis {i + 1}: {axes.explained_variance_ratio_[i]:.3f} of the within-type variation; "
            + ", ".join(f"{name} {explained(axis, value, labels):.2f}" for name, value in covariates.items())
        )
        print("    genes: " + ", ".join(f"{genes[g]} {rho[g]:+.2f}" for g in top))
