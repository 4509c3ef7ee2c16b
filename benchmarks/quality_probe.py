"""Train SCTrilemma for a fixed number of steps on one shared dataset and score a fixed sample of its cells.

The quick experiment behind ``benchmarks/results/quality/NOTES.md``: model and plan settings come as JSON, so one
setting can be compared with another at equal steps. Scores 2,000 fixed random cells: k-means NMI/ARI, depth R²
(lower is better), BRAS, the NMI of all token means (a diagnostic of the mean pooling), and the reconstruction's
logFC Spearman and top-100 DEG Jaccard per cell type against the rest (and, per cell type, the logFC Spearman and
how much of the observed contrast the reconstruction keeps).

Usage: ``python benchmarks/quality_probe.py --steps 400 --batch 64 --model '{"crop_size": 256}' --plan '{"lr": 5e-3}'``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import anndata as ad
import numpy as np
import scvi
from sklearn.decomposition import PCA

from sctrilemma import SCTrilemma, metrics
from sctrilemma.metrics._fidelity import _detection_rate

CONTEXT_KEYS = {"kang2018_pbmc_ctrl": "donor", "cellbench_lung_celllines": "batch"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--data", default="kang2018_pbmc_ctrl", choices=sorted(CONTEXT_KEYS))
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--model", default="{}", help="SCTrilemma keyword arguments, as JSON")
    parser.add_argument("--plan", default="{}", help="plan_kwargs, as JSON")
    parser.add_argument("--batch", type=int, default=None, help="cells per step (default: the preset's)")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    context = CONTEXT_KEYS[args.data]
    adata = ad.read_h5ad(Path(args.data_dir) / f"{args.data}.h5ad")
    adata.obs[context] = adata.obs[context].astype(str)
    scvi.settings.seed = args.seed
    SCTrilemma.setup_anndata(adata, donor_key=context)
    model = SCTrilemma(adata, preset=args.preset, **json.loads(args.model))
    start = time.perf_counter()
    model.train(
        max_steps=args.steps, batch_size=args.batch, enable_progress_bar=False, plan_kwargs=json.loads(args.plan)
    )
    train_s = time.perf_counter() - start

    cells = np.sort(np.random.default_rng(0).choice(adata.n_obs, min(2000, adata.n_obs), replace=False))
    labels = adata.obs["cell_type"].to_numpy()[cells]
    embedding = model.get_latent_representation(indices=cells)
    scores = metrics.nmi_ari_kmeans(embedding, labels, n_init=5)
    scores["depth_r2"] = metrics.depth_r2(embedding, np.asarray(adata.X[cells].sum(1)).ravel())
    tokens = model.get_latent_tokens(indices=cells).reshape(cells.size, -1)
    scores["tokens_nmi"] = metrics.nmi_ari_kmeans(PCA(50).fit_transform(tokens), labels, n_init=5)["nmi"]
    scores["bras"] = metrics.bras(embedding, labels, adata.obs[context].to_numpy()[cells])
    reconstruction = model.get_normalized_expression(
        indices=cells, gene_list=list(adata.var_names), library_size="observed", return_numpy=True
    )
    # Both sides normalised once, as the scorecard's metric would normalise them for each contrast.
    observed, reconstructed = metrics.log1p_cp10k(adata.X[cells]), metrics.log1p_cp10k(reconstruction)
    contrasts = [
        metrics.differential_expression_concordance(observed, reconstructed, labels, group, normalize=False)
        for group in np.unique(labels)
    ]
    scores["logfc_spearman"] = np.nanmean([c["logfc_spearman"] for c in contrasts])
    scores["deg_jaccard"] = np.nanmean([c["deg_jaccard"] for c in contrasts])
    print(
        json.dumps(
            {
                "args": vars(args),
                "steps": int(model.trainer.global_step),
                "train_s": round(train_s, 1),
                **{name: round(float(value), 3) for name, value in scores.items()},
                "by_group": contrast_shrinkage(observed, reconstructed, labels, contrasts),
            }
        )
    )


def contrast_shrinkage(observed, reconstructed, labels: np.ndarray, contrasts: list[dict]) -> dict:
    """Per cell type: logFC Spearman, and the slope of the reconstructed on the observed logFC (1: full contrast).

    ``observed`` and ``reconstructed`` are log1p(CP10K). Genes as the scorecard keeps them: summed detection rate of
    the two sides above its default ``min_detection``, 0.02.
    """
    result = {}
    for group, contrast in zip(np.unique(labels), contrasts, strict=True):
        inside = labels == group
        detected = _detection_rate(observed, inside) + _detection_rate(observed, ~inside) > 0.02
        observed_lfc = metrics.contrast_logfc(observed, labels, group, normalize=False)[detected]
        reconstructed_lfc = metrics.contrast_logfc(reconstructed, labels, group, normalize=False)[detected]
        slope = np.polyfit(observed_lfc, reconstructed_lfc, 1)[0]
        result[str(group)] = {"logfc_spearman": round(float(contrast["logfc_spearman"]), 3), "slope": round(slope, 3)}
    return result


if __name__ == "__main__":
    main()
