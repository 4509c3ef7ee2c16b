"""Build the small real example shipped with sctrilemma from ``../shared/data``.

Run from the project root: ``python scripts/build_example_data.py [SHARED_DATA_DIR]``.
The output is deterministic (seeded) and documented in ``src/sctrilemma/data/example/PROVENANCE.md``.
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


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("../shared/data"))
