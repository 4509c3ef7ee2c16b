"""Zilionis and Baron at seeds 6-11 beside the 2 Dec benchmark's seeds 0-5: issue 31's bars on each set of seeds.

Usage (from the repository root)::

    PYTHONPATH=benchmarks:benchmarks/results/trilemma/intel_3dec python benchmarks/results/trilemma/epyc_4dec_seeds_6_11/twelve_seeds.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from compare import METRICS, bars, scores

HERE = Path(__file__).parent
EARLIER = HERE.parent / "epyc_2dec"
NAMES = ("zilionis", "baron")
METHODS = ("X_sctrilemma", "X_scvi", "X_pca")


def runs_of(name: str) -> tuple[list[dict], list[dict]]:
    """The 2 Dec runs (seeds 0-5) and this run's (seeds 6-11) of one data set."""
    new = [run for part in ("p1", "p2") for run in json.loads((HERE / part / f"runs_{name}.json").read_text())]
    return json.loads((EARLIER / f"runs_{name}.json").read_text()), new


def table(by_seed: dict[int, dict]) -> list[str]:
    """Mean ± SD over the seeds of each method's headline metrics, a markdown row per metric."""
    rows = []
    for metric in METRICS:
        cells = []
        for method in METHODS:
            values = [s[(method, metric)] for s in by_seed.values() if (method, metric) in s]
            cells.append(f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}" if values else "–")
        rows.append(f"| {metric} | " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    for name in NAMES:
        earlier, new = runs_of(name)
        for label, runs in (("seeds 0-5 (2 Dec)", earlier), ("seeds 6-11", new), ("seeds 0-11", earlier + new)):
            by_seed = scores(runs)
            print(f"\n## {name}, {label}\n\n| metric | SCTrilemma | scVI | PCA |\n|---|---|---|---|")
            print("\n".join(table(by_seed)))
            print("\n" + "\n".join(f"- {line}" for line in bars(by_seed)))
        print(f"\n## {name}, per seed: steps, SCTrilemma / scVI\n")
        for run in earlier + new:
            s = scores([run])[run["seed"]]
            figures = " ".join(f"{m} {s[('X_sctrilemma', m)]:.3f}/{s[('X_scvi', m)]:.3f}" for m in METRICS)
            print(f"- seed {run['seed']}: {run['budgets']['X_sctrilemma']['steps']} steps; {figures}")


if __name__ == "__main__":
    main()
