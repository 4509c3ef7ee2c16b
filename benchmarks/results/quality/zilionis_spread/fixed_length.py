import json
import sys
import warnings

import anndata as ad
import scvi
import torch

sys.path.insert(0, "benchmarks")
from sctrilemma import SCTrilemma
from sctrilemma.metrics import nmi_ari_kmeans

warnings.filterwarnings("ignore")
seed = int(sys.argv[1])
steps_list = [int(s) for s in sys.argv[2].split(",")]
torch.set_num_threads(1)
a = ad.read_h5ad("../shared/data/zilionis2019_mouse_lung_cluey.h5ad")
a.obs_names_make_unique()
a.obs["Animal"] = a.obs["Animal"].astype(str)
y = a.obs.cell_type.astype(str).values
for steps in steps_list:
    scvi.settings.seed = seed
    b = a.copy()
    SCTrilemma.setup_anndata(b, donor_key="Animal")
    m = SCTrilemma(b, preset="small")
    m.train(max_steps=steps, early_stopping=False, enable_progress_bar=False)
    z = m.get_latent_representation()
    r = nmi_ari_kmeans(z, y, seed=seed)
    print(json.dumps({"seed": seed, "steps": steps, **{k: round(v, 3) for k, v in r.items()}}), flush=True)
