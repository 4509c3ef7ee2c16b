"""Scratch: Zilionis, seed 0, trained as trilemma.py trains it (``max_time`` 240 s, early stopping) or with a step
budget instead (``max_steps=2000``, early stopping), printing the steps and the embedding's k-means NMI; run it twice
to see whether runs of one seed agree.

Usage: ``OMP_NUM_THREADS=1 python same_seed.py {time,steps}``
"""

import json
import sys
import warnings
from datetime import timedelta

import anndata as ad
import scvi
import torch

from sctrilemma import SCTrilemma
from sctrilemma.metrics import nmi_ari_kmeans

warnings.filterwarnings("ignore")
budget = sys.argv[1]
torch.set_num_threads(1)
adata = ad.read_h5ad("../shared/data/zilionis2019_mouse_lung_cluey.h5ad")
adata.obs_names_make_unique()
adata.obs["Animal"] = adata.obs["Animal"].astype(str)
scvi.settings.seed = 0
SCTrilemma.setup_anndata(adata, donor_key="Animal")
model = SCTrilemma(adata, preset="small")
length = {"max_epochs": 10_000, "max_time": timedelta(seconds=240)} if budget == "time" else {"max_steps": 2000}
model.train(enable_progress_bar=False, **length)
figures = nmi_ari_kmeans(model.get_latent_representation(), adata.obs["cell_type"].astype(str).to_numpy(), seed=0)
print(
    json.dumps(
        {"budget": budget, "steps": int(model.trainer.global_step), **{k: round(v, 4) for k, v in figures.items()}}
    )
)
