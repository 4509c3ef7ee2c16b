"""Scratch: a leave-Kang-out reference (zero_shot.py's training); the query embedded with the encoder reading
(a) the reference's 4,000 most variable genes (as shipped), (b) the 4,000 most variable of the genes the query
measured (the reference's ranking), (c) every gene."""

import json
import sys
import warnings
from datetime import timedelta

import numpy as np
import scanpy as sc
import scvi
import torch
from anndata import AnnData

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "scripts")
import zero_shot as zs
from train_blood_reference import load_blood_data, query_cells, reference_cells

from sctrilemma import SCTrilemma
from sctrilemma._normalize import log1p_cp10k
from sctrilemma.model._gene_init import MAX_PCA_CELLS, _cell_subset

warnings.filterwarnings("ignore")
seed = int(sys.argv[1])
torch.set_num_threads(1)
blood = load_blood_data("../shared/data")
reference, query = reference_cells(blood, zs.SETTINGS["leave_kang_out"]), query_cells(blood)
scvi.settings.seed = seed
ref = reference.copy()
SCTrilemma.setup_anndata(ref, donor_key="donor", dataset_key="study")
model = SCTrilemma(ref, preset="small")
model.train(max_epochs=10_000, max_time=timedelta(seconds=240), enable_progress_bar=False)
q = SCTrilemma.load_query_data(query.copy(), model)
shipped = q.module.encoder_gene_mask.clone()
genes = AnnData(log1p_cp10k(_cell_subset(ref.X, MAX_PCA_CELLS, seed)))
sc.pp.highly_variable_genes(genes, n_top_genes=4000, flavor="seurat")
dispersion = np.nan_to_num(genes.var["dispersions_norm"].to_numpy(), nan=-np.inf)
assert (genes.var["highly_variable"].to_numpy() == shipped.numpy()).all(), "ranking does not reproduce the mask"
in_query = ref.var_names.isin(query.var_names)
rank = np.where(in_query, dispersion, -np.inf)
among_query = np.zeros(ref.n_vars, dtype=bool)
among_query[np.argsort(-rank)[: min(4000, int(in_query.sum()))]] = True
for name, mask in [("shipped", shipped.numpy()), ("query_variable", among_query), ("all", np.ones(ref.n_vars, bool))]:
    q.module.encoder_gene_mask.copy_(torch.from_numpy(mask))
    figures = zs.zero_shot_figures(q.get_latent_representation(), query, seed=seed)
    print(
        json.dumps(
            {
                "seed": seed,
                "steps": int(model.trainer.global_step),
                "encoder_reads": name,
                "encoder_genes_in_query": int((mask & in_query).sum()),
                **figures,
            }
        ),
        flush=True,
    )
