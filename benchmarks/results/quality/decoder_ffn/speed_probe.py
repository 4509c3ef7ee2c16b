"""Scratch: time get_normalized_expression of 3,000 Kang cells after 30 training steps (decoder FFN per env)."""
import os, time, json, warnings
warnings.filterwarnings("ignore")
import torch, anndata as ad, numpy as np
torch.set_num_threads(2)
import scvi
from sctrilemma import SCTrilemma
a = ad.read_h5ad("../shared/data/kang2018_pbmc_ctrl.h5ad")
a.obs_names_make_unique()
SCTrilemma.setup_anndata(a, donor_key="donor")
m = SCTrilemma(a, preset="small")
m.train(max_steps=30, enable_progress_bar=False)
torch.set_num_threads(2)
idx = np.arange(3000)
m.get_normalized_expression(indices=idx[:200], library_size=1e4, return_numpy=True)
ts = []
for _ in range(3):
    t = time.perf_counter(); x = m.get_normalized_expression(indices=idx, library_size=1e4, return_numpy=True); ts.append(time.perf_counter() - t)
t = time.perf_counter(); z = m.get_latent_representation(indices=idx); tl = time.perf_counter() - t
print(json.dumps({"ffn": os.environ.get("SCTRI_DEC_FFN", "preset"), "expr_s": [round(v, 2) for v in ts], "latent_s": round(tl, 2),
                  "params": sum(p.numel() for p in m.module.decoder.parameters())}))
