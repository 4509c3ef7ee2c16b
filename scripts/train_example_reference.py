"""Train the small reference shipped with sctrilemma (``src/sctrilemma/data/reference/``).

Reproducible: ``python scripts/train_example_reference.py`` (seeded; the small preset's recipe: learning rate,
warm-ups and batch size are the preset's).
The reference is trained on three donors of the shipped example (1015, 1016, 1244); the other two
(1256, 1488) are held out as zero-shot queries in the tests and tutorials.
"""

from __future__ import annotations

import argparse
import time

import scvi

from sctrilemma import SCTrilemma
from sctrilemma.data import load_example
from sctrilemma.data._example import EXAMPLE_REFERENCE_DIR, REFERENCE_DONORS

SEED = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-epochs", type=int, default=40)
    parser.add_argument("--out", default=str(EXAMPLE_REFERENCE_DIR))
    args = parser.parse_args()
    scvi.settings.seed = SEED
    adata = load_example()
    adata = adata[adata.obs["donor"].isin(REFERENCE_DONORS)].copy()
    SCTrilemma.setup_anndata(adata, donor_key="donor")
    model = SCTrilemma(adata, preset="small")
    start = time.perf_counter()
    model.train(max_epochs=args.max_epochs, enable_progress_bar=False)
    print(
        f"trained {args.max_epochs} epochs ({model.trainer.global_step} steps) on {adata.n_obs} cells "
        f"in {time.perf_counter() - start:.0f} s"
    )
    model.save(args.out, overwrite=True)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
