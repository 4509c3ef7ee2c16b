import sys
import warnings

import anndata as ad
import numpy as np
import torch

sys.path.insert(0, "benchmarks")
import pandas as pd
import trilemma
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score as ari
from sklearn.metrics import normalized_mutual_info_score as nmi
from sklearn.metrics import silhouette_samples

warnings.filterwarnings("ignore")
seed = int(sys.argv[1])
torch.set_num_threads(1)
a = ad.read_h5ad("../shared/data/zilionis2019_mouse_lung_cluey.h5ad")
a.obs_names_make_unique()
a.obs["Animal"] = a.obs["Animal"].astype(str)
model, b = trilemma.train_sctrilemma(a.copy(), "Animal", 240.0, seed)
z = model.get_latent_representation()
np.save(f"z_seed{seed}.npy", z)
y = a.obs.cell_type.astype(str).values
print(b)
for r in range(3):
    k = KMeans(4, n_init=1, random_state=r).fit_predict(z)
    print("nmi", round(nmi(y, k), 3), "ari", round(ari(y, k), 3))
    print(pd.crosstab(y, k))
s = silhouette_samples(z, y)
print(pd.Series(s).groupby(y).mean())
