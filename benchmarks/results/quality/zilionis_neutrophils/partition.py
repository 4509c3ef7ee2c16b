"""Scratch: the lowest-inertia k-means partition (20 single starts, as ``geometry.py``) of saved Zilionis embeddings,
crossed with the cell types and with the mice. Usage: ``python .../partition.py EMBEDDING.npy ...`` from the
repository root."""

import sys
import warnings

import anndata as ad
import numpy as np
import pandas as pd
from sklearn.cluster import KMeans

warnings.filterwarnings("ignore")
a = ad.read_h5ad("../shared/data/zilionis2019_mouse_lung_cluey.h5ad")
cell_type = a.obs.cell_type.astype(str).values
mouse = a.obs.Animal.astype(str).values
for path in sys.argv[1:]:
    z = np.load(path).astype(float)
    z = z - z.mean(0)
    best = min((KMeans(4, n_init=1, random_state=42 + r).fit(z) for r in range(20)), key=lambda k: k.inertia_)
    print(path.split("/")[-1])
    print(pd.crosstab(cell_type, best.labels_, rownames=["cell type"], colnames=["cluster"]))
    print(pd.crosstab(mouse, best.labels_, rownames=["mouse"], colnames=["cluster"]), "\n")
