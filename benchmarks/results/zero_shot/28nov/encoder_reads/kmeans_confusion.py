"""Scratch: the leave-Kang-out reference as zero_shot.py trains it; the query's k-means confusion and geometry."""

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import scvi
import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "scripts")
import zero_shot as zs
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score as nmi
from train_blood_reference import load_blood_data, query_cells, reference_cells

warnings.filterwarnings("ignore")
seed = int(sys.argv[1])
out = Path(sys.argv[2])
torch.set_num_threads(1)
blood = load_blood_data("../shared/data")
reference, query = reference_cells(blood, zs.SETTINGS["leave_kang_out"]), query_cells(blood)
scvi.settings.seed = seed
ref_z, q_z, facts = zs.sctrilemma_zero_shot(reference, query, 240.0)
np.save(out / f"query_z_{seed}.npy", q_z)
np.save(out / f"ref_z_{seed}.npy", ref_z)
y = query.obs.cell_type.astype(str).values
depth = np.log(np.asarray(query.X.sum(1)).ravel())
print(facts, json.dumps(zs.zero_shot_figures(q_z, query, seed=seed)))
print(pd.Series(y).value_counts().to_dict())
for r in range(4):
    k = KMeans(4, n_init=1, random_state=r).fit_predict(q_z)
    print("start", r, "nmi", round(nmi(y, k), 3))
    print(pd.crosstab(y, k))
for t in np.unique(y):
    zt = q_z[y == t]
    c = zt - zt.mean(0)
    from sklearn.linear_model import LinearRegression

    res = c - LinearRegression().fit(depth[y == t, None], c).predict(depth[y == t, None])
    print(
        t,
        "within var",
        round(float((c**2).sum(1).mean()), 2),
        "depth share",
        round(1 - float((res**2).sum() / (c**2).sum()), 3),
        "donor share",
        round(
            1
            - float(
                sum(
                    (
                        (c[query.obs.donor.values[y == t] == d] - c[query.obs.donor.values[y == t] == d].mean(0)) ** 2
                    ).sum()
                    for d in np.unique(query.obs.donor.values[y == t])
                )
                / (c**2).sum()
            ),
            3,
        ),
    )
cents = {t: q_z[y == t].mean(0) for t in np.unique(y)}
print({f"{a}|{b}": round(float(((cents[a] - cents[b]) ** 2).sum()), 2) for a in cents for b in cents if a < b})
