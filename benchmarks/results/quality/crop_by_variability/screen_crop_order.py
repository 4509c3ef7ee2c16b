"""Scratch screen: the encoder's crop as each cell's most variable expressed genes instead of its highest counts.

``--arm shipped`` trains the small preset as trilemma.py does (240 s); ``--arm variability`` makes the encoder read the
``--genes`` most variable genes (Seurat flavour, as the preset's 4,000) and take each cell's expressed genes among
them in order of variability (the scanpy rank), up to the crop's 256, in training and in embedding. Scored by the
Scorecard beside a PCA, as ``gene_panel/mild/screen_panel.py`` scores.

Usage (repository root): ``python .../screen_crop_order.py --arm variability --genes 8000 --data X.h5ad --seeds 0 1 2``.
"""

import argparse
import json
import sys

import numpy as np
import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/quality/gene_panel/mild")
import trilemma
from screen_panel import headline_scores, labelled_data

from sctrilemma.model import _gene_init
from sctrilemma.module import _module
from sctrilemma.module._tokens import GeneCrop

SCORE: dict[str, torch.Tensor] = {}


def variable_genes_with_order(counts, n_genes: int, *, max_cells: int = _gene_init.MAX_PCA_CELLS, seed: int = 0):
    """The preset's Seurat-flavour mask, keeping each gene's rank as a score (higher is more variable)."""
    import scanpy as sc
    from anndata import AnnData

    genes = AnnData(_gene_init.log1p_cp10k(_gene_init._cell_subset(counts, max_cells, seed)))
    with _gene_init.torch_threads_kept():
        sc.pp.highly_variable_genes(genes, n_top_genes=n_genes, flavor="seurat")
    dispersion = genes.var["dispersions_norm"].fillna(-np.inf).to_numpy()
    rank = np.empty(dispersion.size, dtype=np.int64)
    rank[np.argsort(-dispersion, kind="stable")] = np.arange(dispersion.size)
    mask = genes.var["highly_variable"].to_numpy(dtype=bool)
    SCORE["score"] = torch.from_numpy((dispersion.size - rank).astype(np.float32))
    SCORE["read"] = SCORE["score"][torch.from_numpy(mask)]  # the encoder's genes, in gene order
    return mask


SHIPPED_CROP = _module.expressed_crop


def crop_by_variability(x, crop_size, random_ties=False, generator=None, among=None):
    """Each cell's expressed genes among the encoder's in order of variability, up to ``crop_size``.

    In embedding the module passes every gene and ``among``; in training it passes the encoder's genes only (the
    thinned counts it reads) and maps the crop's indices back itself.
    """
    if "score" not in SCORE:
        return SHIPPED_CROP(x, crop_size, random_ties, generator, among)
    if among is not None:
        sub, score = x[:, among], SCORE["score"][among]
    elif x.shape[1] == SCORE["read"].numel():
        sub, score = x, SCORE["read"]
    else:
        return SHIPPED_CROP(x, crop_size, random_ties, generator, among)
    n = max(1, min(crop_size, int((sub > 0).sum(1).max())))
    top = ((sub > 0) * score).topk(n, dim=1).indices
    counts = sub.gather(1, top)
    return GeneCrop(top if among is None else among[top], counts, counts > 0)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--arm", choices=["shipped", "variability"], required=True)
    p.add_argument("--genes", type=int, default=4000)
    p.add_argument("--data", nargs="+")
    p.add_argument("--seeds", nargs="+", type=int)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    model_kwargs = {"encoder_genes": args.genes}
    if args.arm == "variability":
        _gene_init.most_variable_genes = variable_genes_with_order
        _module.expressed_crop = crop_by_variability
    for name in args.data:
        label_key, context_key, symbol_key = trilemma.DATASETS[name]
        role = trilemma.default_context_role(name)
        for seed in args.seeds:
            SCORE.clear()
            a = labelled_data(name, context_key)
            model, budget = trilemma.train_sctrilemma(a.copy(), context_key, 240.0, seed, model_kwargs, None, role)
            scores = headline_scores(a, model, seed, label_key, context_key, symbol_key)
            row = {"arm": args.arm, "genes": args.genes, "data": name, "seed": seed, **budget, **scores}
            print(json.dumps(row), flush=True)
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
