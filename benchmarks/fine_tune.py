"""Starting from a reference against training from scratch, at the same minutes, on a study the reference never saw.

The reference is the small preset trained (its default length) on COMBAT 2022 and the 10x PBMC demo sets, no Kang
cell, over the genes the shipped blood reference reads (those all three studies measured). The user's data is all of Kang 2018's control PBMCs (5 donors, 8,684 cells,
another chemistry and lab). Side by side, each for ``--minutes`` of wall clock:

- ``from_reference``: :meth:`~sctrilemma.SCTrilemma.from_pretrained` on Kang (every weight trainable), trained;
- ``scratch``: the small preset trained on Kang from scratch;
- ``scvi``: scVI (scvi-tools defaults, the donor as batch) trained on Kang from scratch;
- ``zero_shot``: the reference's embedding of Kang with no training, for scale.

Scores on Kang's own cell types: k-means NMI and ARI, 15-NN cross-donor accuracy and BRAS over donors.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/fine_tune.py [--seeds 0 1 2] [--minutes 2]
[--out benchmarks/output/fine_tune]``; the reference is trained once into ``--out`` and reused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta
from pathlib import Path

import anndata as ad
import pandas as pd
import scvi
import torch

from sctrilemma import SCTrilemma

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from train_blood_reference import MODEL_OPTIONS, load_blood_data, reference_cells, zero_shot_figures

DATA = Path(__file__).parents[1].parent / "shared" / "data"
REFERENCE_STUDIES = ["COMBAT2022", "10xPBMC"]
METHODS = ("from_reference", "scratch", "scvi", "zero_shot")


def reference_dir(out: Path, data_dir: Path) -> Path:
    """The Kang-free reference, trained once (seed 0, default length) and saved under ``out``."""
    directory = out / "reference_without_kang"
    if not (directory / "model.safetensors").exists():
        scvi.settings.seed = 0
        reference = reference_cells(load_blood_data(data_dir), genes="shared")  # genes all three studies measured
        reference = reference[reference.obs["study"].isin(REFERENCE_STUDIES)].copy()
        reference.obs["study"] = reference.obs["study"].cat.remove_unused_categories()
        SCTrilemma.setup_anndata(reference, donor_key="donor", dataset_key="study")
        model = SCTrilemma(reference, preset="small", **MODEL_OPTIONS["shared"])
        model.train(enable_progress_bar=False)
        model.save(directory, overwrite=True)
    return directory


def kang(data_dir: Path) -> ad.AnnData:
    """All of Kang 2018's control cells, as a user would bring them (Ensembl IDs, symbols in ``var``)."""
    adata = ad.read_h5ad(data_dir / "kang2018_pbmc_ctrl.h5ad")
    adata.obs["donor"] = adata.obs["donor"].astype(str)
    return adata


def run(method: str, seed: int, minutes: float, reference: Path, data_dir: Path) -> dict:
    """One method and seed; returns its figures and training facts."""
    scvi.settings.seed = seed
    adata = kang(data_dir)
    budget = timedelta(minutes=minutes)
    start = time.perf_counter()
    if method == "scvi":
        scvi.model.SCVI.setup_anndata(adata, batch_key="donor")
        model = scvi.model.SCVI(adata, gene_likelihood="zinb")
        model.train(max_time=budget, enable_progress_bar=False)
    elif method == "scratch":
        SCTrilemma.setup_anndata(adata, donor_key="donor")
        model = SCTrilemma(adata, preset="small")
        model.train(max_epochs=10_000, max_time=budget, enable_progress_bar=False)
    elif method == "from_reference":
        model = SCTrilemma.from_pretrained(adata, reference, donor_key="donor")
        model.train(max_epochs=10_000, max_time=budget, enable_progress_bar=False)
    else:
        model = SCTrilemma.load_query_data(adata, reference, donor_key="donor")
    train_s = time.perf_counter() - start
    figures = zero_shot_figures(model.get_latent_representation(), adata, seed=seed)
    return {"method": method, "seed": seed, "train_s": round(train_s, 1), **figures}


def summarize(rows: list[dict]) -> str:
    """Mean ± SD over seeds per method."""
    frame = pd.DataFrame(rows)
    columns = ["nmi", "ari", "knn_cross_donor_accuracy", "bras"]
    lines = ["| method | seeds | " + " | ".join(columns) + " |", "|---" * (len(columns) + 2) + "|"]
    for method, group in frame.groupby("method", sort=False):
        cells = [f"{group[c].mean():.3f} ± {group[c].std(ddof=1) if len(group) > 1 else 0:.3f}" for c in columns]
        lines.append(f"| {method} | {len(group)} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--minutes", type=float, default=2.0, help="training minutes per method")
    parser.add_argument("--threads", type=int, default=1, help="torch's thread count, pinned for every method")
    parser.add_argument("--data-dir", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/output/fine_tune"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    reference = reference_dir(args.out, args.data_dir)
    rows = []
    for seed in args.seeds:
        for method in args.methods:
            rows.append(run(method, seed, args.minutes, reference, args.data_dir))
            print(json.dumps(rows[-1]), flush=True)
            (args.out / "runs.json").write_text(json.dumps(rows, indent=1))
    table = summarize(rows)
    (args.out / "summary.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
