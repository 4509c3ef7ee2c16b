"""A study that measured only part of the genes: what the measured-genes rule changes, with and without it.

Training on several datasets (``dataset_key``) takes a gene that no cell of a dataset expresses as unmeasured there.
This benchmark makes such a study: COMBAT 2022 and the 10x PBMC demo sets over the union of their genes, with a
random half of the genes that both studies detect hidden (set to zero) in the 10x cells, as in a pre-filtered panel.
SCTrilemma (small preset) trains for ``--budget-s`` seconds with the rule and without it (every gene measured
everywhere), then imputes the hidden genes for ``--n-cells`` of the 10x cells (``library_size=1e4``) and compares
them with their true counts:

- ``hidden_share``: the hidden genes' share of each cell's imputed expression, against the true share;
- ``gene_mean_r``: Pearson r over hidden genes of their mean log1p CP10K, imputed against true;
- ``cell_r``: Pearson r over hidden genes within each cell, averaged over cells.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/measured_genes.py [--budget-s 240] [--seeds 0 1]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scvi
import torch

from sctrilemma import SCTrilemma

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from train_blood_reference import load_blood_data, reference_cells
from zero_shot import measured_genes_rule

PANEL_STUDY = "10xPBMC"


def hide_genes(reference, seed: int):
    """``reference`` with half of the genes both studies detect set to zero in ``PANEL_STUDY``'s cells.

    Returns the masked copy, the unmasked one (same cells: those left with counts) and the hidden genes' positions.
    """
    panel = (reference.obs["study"] == PANEL_STUDY).to_numpy()
    detected = [np.asarray((reference.X[rows] > 0).sum(0)).ravel() > 0 for rows in (panel, ~panel)]
    candidates = np.flatnonzero(detected[0] & detected[1])
    hidden = np.sort(np.random.default_rng(seed).choice(candidates, candidates.size // 2, replace=False))
    is_hidden = np.zeros(reference.n_vars, dtype=np.float32)
    is_hidden[hidden] = 1
    masked = reference.copy()
    masked.X = sp.csr_matrix(reference.X - sp.diags(panel.astype(np.float32)) @ reference.X @ sp.diags(is_hidden))
    masked.X.eliminate_zeros()
    has_counts = np.asarray(masked.X.sum(1)).ravel() > 0
    return masked[has_counts].copy(), reference[has_counts].copy(), hidden


def run(masked, truth, hidden: np.ndarray, rule: bool, seed: int, budget_s: float, n_cells: int) -> dict:
    """Train on ``masked`` with or without the rule; score the imputed hidden genes of panel cells against ``truth``."""
    scvi.settings.seed = seed
    data = masked.copy()
    SCTrilemma.setup_anndata(data, donor_key="donor", dataset_key="study")
    model = SCTrilemma(data, preset="small")
    with measured_genes_rule(rule):
        model.train(max_epochs=10_000, max_time=timedelta(seconds=budget_s), enable_progress_bar=False)
    panel = np.flatnonzero((data.obs["study"] == PANEL_STUDY).to_numpy())
    cells = np.sort(np.random.default_rng(seed).choice(panel, min(n_cells, panel.size), replace=False))
    imputed = model.get_normalized_expression(indices=cells, library_size=1e4, return_numpy=True)
    true_counts = truth.X[cells].toarray()
    true_cp10k = true_counts / true_counts.sum(1, keepdims=True) * 1e4
    imputed_log, true_log = np.log1p(imputed[:, hidden]), np.log1p(true_cp10k[:, hidden])
    cell_r = [np.corrcoef(a, b)[0, 1] for a, b in zip(imputed_log, true_log, strict=True) if b.std() > 0]
    return {
        "rule": rule,
        "seed": seed,
        "steps": int(model.trainer.global_step),
        "hidden_genes": int(hidden.size),
        "hidden_share_imputed": round(float(imputed[:, hidden].sum(1).mean() / 1e4), 4),
        "hidden_share_true": round(float(true_cp10k[:, hidden].sum(1).mean() / 1e4), 4),
        "gene_mean_r": round(float(np.corrcoef(imputed_log.mean(0), true_log.mean(0))[0, 1]), 4),
        "cell_r": round(float(np.mean(cell_r)), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default=str(Path(__file__).parents[1] / ".." / "shared" / "data"))
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--n-cells", type=int, default=500)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "zero_shot"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    truth = reference_cells(load_blood_data(args.data_dir), ["COMBAT2022", PANEL_STUDY])
    rows = []
    for seed in args.seeds:
        masked, unmasked, hidden = hide_genes(truth, seed)
        for rule in (True, False):
            row = run(masked, unmasked, hidden, rule, seed, args.budget_s, args.n_cells)
            print(json.dumps(row), flush=True)
            rows.append(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"measured_genes_{'_'.join(map(str, args.seeds))}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
