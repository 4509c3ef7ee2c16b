"""Scratch: the 12,000-cell Leiden check of ``tests/test_scanpy_workflow.py`` for two example-reference weights and both
read-outs (the dataset's prior mean, here one dataset, and each donor's group prior mean).

Run from the repository root, with the other weights extracted first::

    mkdir -p OTHER && git show 6b77ceb:src/sctrilemma/data/reference/model.safetensors > OTHER/model.safetensors
    OMP_NUM_THREADS=1 python benchmarks/results/quality/dataset_centred/leiden_check.py OTHER
"""

import sys
import warnings

import scanpy as sc
import torch
from sklearn.metrics import adjusted_rand_score

sys.path.insert(0, "tests")
from test_scanpy_workflow import _example_at_scale

from sctrilemma import SCTrilemma
from sctrilemma.data import example_reference_dir

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
for label, reference in (("shipped weights", example_reference_dir()), ("other weights", sys.argv[1])):
    adata = _example_at_scale(4)
    sc.pp.filter_cells(adata, min_counts=1)
    model = SCTrilemma.load_query_data(adata, reference)
    embedding = model.get_latent_representation()
    codes = torch.as_tensor(model._cell_codes(model.adata))
    with torch.no_grad():
        group_means = model.module.prior.to_mean(codes).numpy()
    for name, values in (("dataset read-out", embedding), ("donor read-out", embedding - group_means)):
        scored = adata.copy()
        scored.obsm["X"] = values
        sc.pp.neighbors(scored, use_rep="X", random_state=0)
        sc.tl.leiden(scored, resolution=0.2, flavor="igraph", n_iterations=2, directed=False, random_state=0)
        ari = adjusted_rand_score(scored.obs["cell_type"], scored.obs["leiden"])
        print(label, name, scored.obs["leiden"].nunique(), "clusters, ARI", round(float(ari), 3), flush=True)
