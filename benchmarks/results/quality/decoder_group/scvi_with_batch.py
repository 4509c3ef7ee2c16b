"""scVI with the context as its batch covariate, 240 s: k-means NMI/ARI against the labels and NMI against the context.

Each argument is ``PATH,LABEL_KEY,CONTEXT_KEY``; scored by 10 single-start k-means on all cells. Run from the
repository root::

    OMP_NUM_THREADS=1 python benchmarks/results/quality/decoder_group/scvi_with_batch.py DATA.h5ad,cell_type,batch
"""

import sys

import anndata as ad
import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from sctrilemma.benchmark import scvi_baseline

torch.set_num_threads(1)
for spec in sys.argv[1:]:
    path, label_key, context_key = spec.split(",")
    adata = ad.read_h5ad(path)
    adata.obs_names_make_unique()
    adata.obs[context_key] = adata.obs[context_key].astype(str)
    labels, context = adata.obs[label_key].astype(str).to_numpy(), adata.obs[context_key].to_numpy()
    result = scvi_baseline(adata, batch_key=context_key, time_budget_s=240, seed=0, reconstruct=False)
    n_labels = len(set(labels))
    runs = [KMeans(n_labels, n_init=1, random_state=s).fit_predict(result.embedding) for s in range(10)]
    nmi = np.mean([normalized_mutual_info_score(labels, run) for run in runs])
    ari = np.mean([adjusted_rand_score(labels, run) for run in runs])
    context_nmi = np.mean([normalized_mutual_info_score(context, run) for run in runs])
    print(
        path.split("/")[-1],
        "epochs",
        result.details["epochs"],
        f"NMI {nmi:.3f} ARI {ari:.3f} batch-NMI {context_nmi:.3f}",
    )
