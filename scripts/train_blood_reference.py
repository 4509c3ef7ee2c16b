"""Train the blood reference on every shared blood data set and write it with its scvi-hub model card.

Three studies of human blood from ``../shared/data`` (provenance in that folder's ``README.md``):

- Kang 2018 control PBMCs (10x 3' v1, 5 lupus patients, cell types from the authors; donors 1256 and 1488 are held
  out as the labelled zero-shot query, so the reference sees donors 1015, 1016 and 1244);
- COMBAT 2022 blood (10x 5', 2 healthy, 2 mild and 2 critical COVID-19 donors);
- 10x Genomics PBMC demo sets (3' v2, 3' v3 and 5', one donor each).

The genes are the union over the studies (:func:`sctrilemma.data.concat_studies`: matched by symbol, Ensembl IDs
where Kang gives them), and the study is the model's ``dataset_key``, so genes a study did not measure are not
taken as zeros. The model is ``SCTrilemma(preset="small")`` trained for its default length. Over the union it takes
the user guide's recipe for references queried with other gene panels (``MODEL_OPTIONS``: the encoder reads every
gene, and a random share of each training cell's genes is hidden from it); over the shared genes, which every query
of these studies measures, its gene embeddings start from the data. The script then embeds the held-out donors
zero-shot, labels them with the classifier fitted on the reference donors' cell types
(:meth:`~sctrilemma.SCTrilemma.fit_label_classifier`, saved with the model), and writes ``model.safetensors``,
scvi-hub's metadata, the model card and ``metrics.json`` to ``--out``.

Usage: ``python scripts/train_blood_reference.py [--data-dir ../shared/data] [--out blood_reference] [--seed 0]
[--genes union|shared] [--classifier-only] [--label-transfer-summary PATH]`` (training takes about 5 minutes over the
union of 21,893 genes and 3.5 over the 2,349 shared ones on one CPU thread).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import scvi

from sctrilemma import SCTrilemma
from sctrilemma.data import concat_studies
from sctrilemma.data._example import HELD_OUT_DONORS

STUDY_FILES = {
    "Kang2018": "kang2018_pbmc_ctrl.h5ad",
    "COMBAT2022": "combat2022_covid_blood_6donors_scdapp.h5ad",
    "10xPBMC": "10x_pbmc_v2_v3_5p_scwgparis.h5ad",
}
CHEMISTRY = {"Kang2018": "10x 3' v1", "COMBAT2022": "10x 5'"}
OBS_COLUMNS = ["study", "donor", "chemistry", "condition", "cell_type"]
QUERY_STUDY = "Kang2018"
REFERENCE_CELLS_FILE = "reference_cells.h5ad"
# The model's options per gene rule: on the union a query of one study measures a small part of the genes
# (Kang's 2,511 of 21,893), which the preset's encoder was not trained for (benchmarks/zero_shot.py). Over the 2,349
# shared genes the gene embeddings start from the data, as the preset starts them above 3,000 genes: in 1,200 steps
# the reference sees each of its 12,457 cells about six times, where that start pays.
MODEL_OPTIONS: dict[str, dict] = {
    "union": {"encoder_genes": "all", "gene_panel_min_fraction": 0.1},
    "shared": {"gene_embedding_init": "pca"},
}
GENE_RULES = {
    "union": "every gene that some study detected",
    "shared": "the genes that every study detected, so that no study's unmeasured genes enter",
}


def load_blood_data(data_dir: str | Path) -> ad.AnnData:
    """All cells of the three blood studies over the union of their genes, with harmonised ``obs`` columns.

    ``obs``: ``study``, ``donor`` (prefixed by the study; each 10x demo set is one donor), ``chemistry``,
    ``condition`` and ``cell_type`` (Kang's cells only; missing elsewhere).
    """
    studies = {}
    for study, file in STUDY_FILES.items():
        adata = ad.read_h5ad(Path(data_dir) / file)
        obs = pd.DataFrame(index=adata.obs_names)
        donor = adata.obs["batch"] if study == "10xPBMC" else adata.obs["donor"]
        obs["donor"] = f"{study}:" + donor.astype(str)
        obs["chemistry"] = adata.obs["technology"].astype(str) if study == "10xPBMC" else CHEMISTRY[study]
        obs["condition"] = adata.obs["condition"].astype(str) if "condition" in adata.obs else "healthy"
        obs["cell_type"] = adata.obs["cell_type"].astype(str) if "cell_type" in adata.obs else None
        adata.obs = obs
        studies[study] = adata
    blood = concat_studies(studies, study_key="study")
    for column in ("donor", "chemistry", "condition", "cell_type"):
        blood.obs[column] = blood.obs[column].astype("category")
    return blood


def held_out(blood: ad.AnnData) -> np.ndarray:
    """Boolean ``(n_obs,)``: the cells of Kang's held-out donors, the labelled query."""
    return blood.obs["donor"].isin([f"{QUERY_STUDY}:{d}" for d in HELD_OUT_DONORS]).to_numpy()


def query_cells(blood: ad.AnnData) -> ad.AnnData:
    """Kang's held-out donors as a user would bring them: Kang's own genes (Ensembl IDs, with symbols)."""
    kang_genes = blood.var_names.str.startswith("ENSG")
    return blood[held_out(blood), kang_genes].copy()


def reference_cells(blood: ad.AnnData, studies: list[str] | None = None, genes: str = "union") -> ad.AnnData:
    """The training cells (Kang's held-out donors excluded) of ``studies`` (all by default).

    ``genes="union"`` keeps every gene some training cell expresses; ``"shared"`` only those that every study
    expresses in some cell (the genes all of them measured).
    """
    keep = ~held_out(blood) & (blood.obs["study"].isin(studies) if studies else True)
    reference = blood[keep]
    detected = [
        np.asarray((reference[reference.obs["study"] == study].X > 0).sum(0)).ravel() > 0
        for study in reference.obs["study"].unique()
    ]
    expressed = np.logical_and.reduce(detected) if genes == "shared" else np.logical_or.reduce(detected)
    reference = reference[:, expressed].copy()
    reference.obs["study"] = reference.obs["study"].cat.remove_unused_categories()
    return reference


def zero_shot_figures(embedding: np.ndarray, query: ad.AnnData, seed: int = 0) -> dict[str, float]:
    """k-means NMI/ARI, 15-NN cross-donor cell-type accuracy and BRAS over donors of a query's embedding."""
    from sctrilemma.metrics import bras, celltype_retrieval, nmi_ari_kmeans

    labels, donors = query.obs["cell_type"].astype(str), query.obs["donor"].astype(str)
    figures = nmi_ari_kmeans(embedding, labels, seed=seed)
    retrieval = celltype_retrieval(embedding, labels, donors, n_neighbors=15, seed=seed)
    figures["knn_cross_donor_accuracy"] = retrieval["balanced_accuracy"]
    figures["bras"] = bras(embedding, labels, donors)
    return {key: round(float(value), 4) for key, value in figures.items()}


def label_transfer_figures(transferred: pd.DataFrame, query: ad.AnnData) -> dict[str, float]:
    """Accuracy of transferred labels against the query's ``cell_type`` (unknown counts as wrong), and the unknown rate."""
    correct = transferred["prediction"].astype(str).to_numpy() == query.obs["cell_type"].astype(str).to_numpy()
    return {
        "label_transfer_accuracy": round(float(correct.mean()), 4),
        "label_transfer_unknown_rate": round(float(transferred["is_unknown"].mean()), 4),
    }


def embedded_reference_cells(reference: ad.AnnData, n_cells: int, seed: int) -> ad.AnnData:
    """A random ``n_cells`` of the reference's cells with their ``obs`` and embedding, without counts.

    Shipped beside the model, they are what a query is compared with, e.g. in a joint UMAP.
    """
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(reference.n_obs, size=min(n_cells, reference.n_obs), replace=False))
    cells = ad.AnnData(obs=reference.obs.iloc[keep][OBS_COLUMNS].copy())
    cells.obsm["X_sctrilemma"] = reference.obsm["X_sctrilemma"][keep].astype(np.float32)
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default=str(Path(__file__).parents[1] / ".." / "shared" / "data"))
    parser.add_argument("--out", default="blood_reference")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--genes",
        choices=["union", "shared"],
        default="union",
        help="every gene of any study (the full reference), or only those every study measured (the shipped one)",
    )
    parser.add_argument("--n-embedded-cells", type=int, default=4000, help="reference cells kept with their embedding")
    parser.add_argument(
        "--classifier-only",
        action="store_true",
        help="keep the weights saved in --out and only fit the label classifier, then rewrite the card and figures",
    )
    parser.add_argument(
        "--label-transfer-summary",
        type=Path,
        default=None,
        help="summary.md of benchmarks/label_transfer.py, quoted on the model card",
    )
    args = parser.parse_args()
    from sctrilemma.io import write_hub_files

    scvi.settings.seed = args.seed
    blood = load_blood_data(args.data_dir)
    reference, query = reference_cells(blood, genes=args.genes), query_cells(blood)
    SCTrilemma.setup_anndata(reference, donor_key="donor", dataset_key="study")
    if args.classifier_only:
        model = SCTrilemma.load(args.out, adata=reference)
        training = json.loads((Path(args.out) / "metrics.json").read_text())
        training = {key: training[key] for key in ("train_s", "steps", "epochs")}
    else:
        model = SCTrilemma(reference, preset="small", **MODEL_OPTIONS[args.genes])
        start = time.perf_counter()
        model.train(enable_progress_bar=False)
        training = {
            "train_s": round(time.perf_counter() - start, 1),
            "steps": int(model.trainer.global_step),
            "epochs": int(model.trainer.current_epoch),
        }
    model.fit_label_classifier("cell_type", seed=args.seed)  # Kang's labelled cells; the others have none
    model.save(args.out, overwrite=True)
    reference.obsm["X_sctrilemma"] = model.get_latent_representation()

    query_model = SCTrilemma.load_query_data(query.copy(), args.out)
    figures = zero_shot_figures(query_model.get_latent_representation(), query, seed=args.seed)
    figures.update(label_transfer_figures(query_model.predict_labels(), query))
    embedded = embedded_reference_cells(reference, args.n_embedded_cells, args.seed)
    embedded.write_h5ad(Path(args.out) / REFERENCE_CELLS_FILE, compression="gzip")
    size_mb = (Path(args.out) / "model.safetensors").stat().st_size / 1e6
    summary = {
        "cells": {study: int(n) for study, n in reference.obs["study"].value_counts().items()},
        "donors": int(reference.obs["donor"].nunique()),
        "genes": int(reference.n_vars),
        **training,
        "size_mb": round(size_mb, 2),
        "genes_rule": args.genes,
        "query": f"Kang 2018 donors {', '.join(HELD_OUT_DONORS)} ({query.n_obs} cells, {query.n_vars} genes)",
        "zero_shot": figures,
    }
    evaluation = ""
    if args.label_transfer_summary is not None:
        evaluation = (
            "Label transfer across a labelled shift with one cell type left out of the reference "
            "(`benchmarks/label_transfer.py`: SCTrilemma's classifier beside CellTypist's recipe, scANVI with "
            "scArches and a projected PCA's 15-NN vote; mean ± SD over 3 seeds):\n\n"
            + args.label_transfer_summary.read_text().strip()
        )
    print(json.dumps(summary, indent=2))
    write_hub_files(
        args.out,
        license_info="cc-by-4.0",
        description=(
            "A blood reference for sctrilemma: the small preset trained on three public studies of human blood, "
            f"{reference.n_obs:,} cells from {summary['donors']} donors in four 10x chemistries, over "
            f"{reference.n_vars:,} genes ({GENE_RULES[args.genes]}). `{REFERENCE_CELLS_FILE}` holds "
            f"{embedded.n_obs:,} of the training cells with their embedding and annotations, for label transfer "
            "and joint plots."
        ),
        training_data=(
            "Kang et al. 2018 control PBMCs (GEO GSE96583; donors 1015, 1016, 1244), COMBAT 2022 COVID-19 blood "
            "(6 donors: healthy, mild, critical) and the 10x Genomics PBMC demo sets (3' v2, 3' v3, 5'); "
            f"cells per study: {summary['cells']}. Raw counts as deposited; provenance in sctrilemma's shared data."
        ),
        intended_use=(
            "Embedding human blood and PBMC cells zero-shot, and labelling them with the four Kang 2018 cell types "
            "(CD4 T, CD14+ monocytes, B, NK) by the classifier stored with the model (`predict_labels`), with a "
            "probability, an uncertainty and an unknown class for cells far from every known type. Not validated on "
            "other tissues or species. Types the reference lacks are named unknown only where the embedding sets "
            "them apart: CD8 T cells, for one, come out as CD4 T or NK cells. Read a query's labels with its marker "
            "genes."
        ),
        evaluation=evaluation,
        metrics=summary,
        tissues=["blood"],
        training_code_url="scripts/train_blood_reference.py in the sctrilemma repository",
        overwrite=True,
    )
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
