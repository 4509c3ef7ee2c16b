"""Where k-means goes wrong: clusters against labels and batches, for SCTrilemma and for PCA.

Trains SCTrilemma as ``benchmarks/trilemma.py`` does (small preset, 240 s), then prints k-means NMI against the
labels and the context, 5-fold 15-NN accuracy of each, and the crosstabs. Run from the repository root::

    OMP_NUM_THREADS=1 python benchmarks/results/quality/decoder_group/kmeans_crosstab.py DATA.h5ad LABEL CONTEXT SEED
"""

import sys
import time
from datetime import timedelta

import anndata as ad
import numpy as np
import pandas as pd
import scvi
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score
from sklearn.model_selection import cross_val_predict
from sklearn.neighbors import KNeighborsClassifier

from sctrilemma import SCTrilemma
from sctrilemma.benchmark import pca_baseline

path, label_key, context_key, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(1)
adata = ad.read_h5ad(path)
scvi.settings.seed = seed
SCTrilemma.setup_anndata(adata, donor_key=context_key)
model = SCTrilemma(adata, preset="small")
start = time.perf_counter()
model.train(max_epochs=10_000, max_time=timedelta(seconds=240), enable_progress_bar=False)
print("train_s", time.perf_counter() - start, "steps", model.trainer.global_step)
embeddings = {"ours": model.get_latent_representation(), "pca": pca_baseline(adata, seed=seed).embedding}
labels, context = adata.obs[label_key].astype(str).to_numpy(), adata.obs[context_key].astype(str).to_numpy()
for name, embedding in embeddings.items():
    clusters = KMeans(len(set(labels)), n_init=10, random_state=seed).fit_predict(embedding)
    knn_labels = cross_val_predict(KNeighborsClassifier(15), embedding, labels, cv=5)
    knn_context = cross_val_predict(KNeighborsClassifier(15), embedding, context, cv=5)
    print(
        f"\n== {name}: kmeans NMI label {normalized_mutual_info_score(labels, clusters):.3f}, "
        f"batch {normalized_mutual_info_score(context, clusters):.3f}; "
        f"15-NN acc label {np.mean(knn_labels == labels):.3f}, batch {np.mean(knn_context == context):.3f}"
    )
    print(pd.crosstab(clusters, labels))
    print(pd.crosstab(clusters, context))
