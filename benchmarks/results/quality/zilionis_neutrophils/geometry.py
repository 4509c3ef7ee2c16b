"""Scratch: k-means (20 single starts) on saved Zilionis embeddings, how often the neutrophils split, and the
distances between cell-type centroids, with the neutrophils as Zilionis's N1 subset and the rest (N2-N6).
Usage: ``python .../geometry.py EMBEDDING.npy ...`` from the repository root."""

import sys
import warnings

import anndata as ad
import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score as ari
from sklearn.metrics import normalized_mutual_info_score as nmi

warnings.filterwarnings("ignore")
a = ad.read_h5ad("../shared/data/zilionis2019_mouse_lung_cluey.h5ad")
y = a.obs.cell_type.astype(str).values
sub = a.obs.Minor_subset.astype(str).values
group = np.where(y == "Neutrophils", np.where(sub == "N1", "Neu_N1", "Neu_other"), y)
for path in sys.argv[1:]:
    z = np.load(path).astype(float)
    z = z - z.mean(0)
    scores, parts = [], []
    for r in range(20):
        k = KMeans(4, n_init=1, random_state=42 + r).fit(z)
        scores.append((nmi(y, k.labels_), ari(y, k.labels_), k.inertia_))
        parts.append(k.labels_)
    s = np.array(scores)
    cent = {g: z[group == g].mean(0) for g in np.unique(group)}
    spread = {g: np.sqrt(((z[group == g] - cent[g]) ** 2).sum(1).mean()) for g in cent}
    d = lambda p, q, cent=cent: np.linalg.norm(cent[p] - cent[q])
    # neutrophils split and NK+T merged?
    split = []
    for lab in parts:
        ct = pd.crosstab(y, lab)
        neu = ct.loc["Neutrophils"]
        split.append(int((neu >= 40).sum() >= 2))
    print(
        f"{path.split('/')[-1]}: NMI {s[:, 0].mean():.3f} ARI {s[:, 1].mean():.3f} split-neutrophil starts {sum(split)}/20;"
        f" best-inertia start ARI {s[s[:, 2].argmin(), 1]:.3f}, split? {split[s[:, 2].argmin()]}"
    )
    print(
        f"  NK-T {d('NK cells', 'T cells'):.2f}  N1-other {d('Neu_N1', 'Neu_other'):.2f}  B-T {d('B cells', 'T cells'):.2f}"
        f"  B-NK {d('B cells', 'NK cells'):.2f}  lymph-neu {d('T cells', 'Neu_N1'):.2f}"
    )
    print("  rms spread", {g: round(v, 2) for g, v in spread.items()})
    print(f"  ratio NK-T / N1-other {d('NK cells', 'T cells') / d('Neu_N1', 'Neu_other'):.2f}")
