"""Build the small real examples shipped with sctrilemma from ``../shared/data``.

Run from the project root: ``python scripts/build_example_data.py [SHARED_DATA_DIR]``.
The output is deterministic (seeded) and documented in ``src/sctrilemma/data/example/PROVENANCE.md``: Kang 2018
PBMCs (2,511 genes, cell types) and a full-transcriptome query, 10x Genomics' 1k PBMC 3' v3 demo set.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anndata as ad
import numpy as np
import scipy.sparse as sp

CELLS_PER_DONOR = 600
SEED = 0
OUT = Path("src/sctrilemma/data/example/kang2018_pbmc_example.h5ad")
PBMC_V3_OUT = Path("src/sctrilemma/data/example/pbmc_1k_v3.h5ad")
PBMC_V3_BATCH = "1k_PBMC_v3_filt"
PBMC_V3_CELLS = 400


def main(shared_data: Path) -> None:
    full = ad.read_h5ad(shared_data / "kang2018_pbmc_ctrl.h5ad")
    rng = np.random.default_rng(SEED)
    keep = []
    for donor in sorted(full.obs["donor"].unique()):
        idx = np.flatnonzero(full.obs["donor"].to_numpy() == donor)
        keep.append(np.sort(rng.choice(idx, size=min(CELLS_PER_DONOR, idx.size), replace=False)))
    keep = np.sort(np.concatenate(keep))
    small = full[keep].copy()
    small.X = sp.csr_matrix(small.X.astype(np.int32))
    small.obs = small.obs[["donor", "cell_type", "condition", "batch"]].copy()
    for col in small.obs.columns:
        small.obs[col] = small.obs[col].astype(str).astype("category")
    small.var = small.var[["gene_symbol"]].copy()
    small.var.index.name = "ensembl_id"
    small.uns = {
        "source": {
            "dataset": "Kang et al. 2018, Nat Biotechnol 36:89-94, GEO GSE96583 (control lane GSM2560248)",
            "built_from": "shared/data/kang2018_pbmc_ctrl.h5ad (muscat data/kang.rda, commit 894ad198)",
            "subsample": f"{CELLS_PER_DONOR} cells per donor, numpy default_rng({SEED}), all 2,511 genes",
            "values": "raw integer UMI counts",
        }
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    small.write_h5ad(OUT, compression="gzip")
    print(small, f"\n{OUT}: {OUT.stat().st_size / 1e6:.2f} MB")
    build_pbmc_v3(shared_data)


def build_pbmc_v3(shared_data: Path) -> None:
    """400 cells and all genes of the 10x 1k PBMC 3' v3 demo set: a full-transcriptome query, by gene symbols."""
    full = ad.read_h5ad(shared_data / "10x_pbmc_v2_v3_5p_scwgparis.h5ad")
    batch = np.flatnonzero(full.obs["batch"].to_numpy() == PBMC_V3_BATCH)
    cells = full[np.sort(np.random.default_rng(SEED).choice(batch, PBMC_V3_CELLS, replace=False))]
    query = ad.AnnData(
        X=sp.csr_matrix(cells.X.astype(np.int32)),
        obs=cells.obs[["batch", "technology"]].astype(str).astype("category"),
        var=cells.var.iloc[:, :0].copy(),
    )
    query.var.index.name = "gene_symbol"
    query.uns = {
        "source": {
            "dataset": "10x Genomics 1k PBMCs from a healthy donor, Chromium 3' v3 (public demo data set)",
            "built_from": f"shared/data/10x_pbmc_v2_v3_5p_scwgparis.h5ad, batch {PBMC_V3_BATCH}",
            "subsample": f"{PBMC_V3_CELLS} cells, numpy default_rng({SEED}), all genes",
            "values": "raw integer UMI counts; gene symbols; no cell-type labels",
        }
    }
    query.write_h5ad(PBMC_V3_OUT, compression="gzip")
    print(query, f"\n{PBMC_V3_OUT}: {PBMC_V3_OUT.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("../shared/data"))
