"""``zero_shot.py``'s SCTrilemma references (240 s each), each query scored with both read-outs of the same model.

``sctrilemma`` is the small preset's embedding (centred on each donor's prior mean), ``sctrilemma_posterior_mean``
the pooled posterior mean. Run from the repository root::

    OMP_NUM_THREADS=1 python benchmarks/results/zero_shot/prior_centred/both_readouts.py SEEDS OUT
"""

import json
import sys
import time
from datetime import timedelta

import scvi
import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "scripts")
import zero_shot

from sctrilemma import SCTrilemma

torch.set_num_threads(1)
seeds, out = [int(s) for s in sys.argv[1].split(",")], sys.argv[2]
blood = zero_shot.load_blood_data("../shared/data")
for seed in seeds:
    for setting, studies in zero_shot.SETTINGS.items():
        reference, query = zero_shot.reference_cells(blood, studies), zero_shot.query_cells(blood)
        scvi.settings.seed = seed
        training = reference.copy()
        SCTrilemma.setup_anndata(training, donor_key="donor", dataset_key="study")
        model = SCTrilemma(training, preset="small")
        start = time.perf_counter()
        model.train(max_epochs=10_000, max_time=timedelta(seconds=240), enable_progress_bar=False)
        facts = {"train_s": round(time.perf_counter() - start, 1), "steps": int(model.trainer.global_step)}
        query_model = SCTrilemma.load_query_data(query.copy(), model)
        for centred in (True, False):
            model.module.embedding_centred_on_prior = centred
            query_model.module.embedding_centred_on_prior = centred
            reference_z, query_z = model.get_latent_representation(), query_model.get_latent_representation()
            figures = zero_shot.zero_shot_figures(query_z, query, seed=seed)
            if reference.obs["cell_type"].notna().any():
                figures.update(zero_shot.transfer_accuracy(reference_z, reference, query_z, query))
            if reference.obs["study"].nunique() > 1:
                studies_of_cells = reference.obs["study"].astype(str).to_numpy()
                figures["study_mixing"] = round(zero_shot.study_mixing(reference_z, studies_of_cells), 4)
            method = "sctrilemma" if centred else "sctrilemma_posterior_mean"
            row = {"setting": setting, "method": method, "seed": seed, **facts, **figures}
            print(json.dumps(row), flush=True)
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")
