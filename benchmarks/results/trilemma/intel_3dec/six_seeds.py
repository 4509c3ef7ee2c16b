"""Baron and Zilionis with the early stop (the default) over six seeds, and Baron's stop paired over five.

Seeds 0-2 are ``with_stop/runs_<name>.json``, seeds 3-5 ``with_stop/runs_<name>_seeds_3_5.json``; Baron's seeds 0-4
without the stop are ``runs_baron.json`` and ``runs_baron_seeds_3_4.json``. Usage (from the repository root)::

    PYTHONPATH=benchmarks python benchmarks/results/trilemma/intel_3dec/six_seeds.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from compare import METRICS, bars, scores

HERE = Path(__file__).parent


def load(*names: str) -> list[dict]:
    """The runs in the named files of this folder, concatenated."""
    return [run for name in names for run in json.loads((HERE / name).read_text())]


def main() -> None:
    for name in ("baron", "zilionis"):
        with_stop = scores(load(f"with_stop/runs_{name}.json", f"with_stop/runs_{name}_seeds_3_5.json"))
        print(f"## {name} with the stop, seeds {sorted(with_stop)}\n")
        for method in ("X_sctrilemma", "X_scvi", "X_pca"):
            cells = []
            for metric in METRICS:
                values = [s[(method, metric)] for s in with_stop.values() if (method, metric) in s]
                if values:
                    cells.append(f"{metric} {np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}")
            print(f"- {method}: " + ", ".join(cells))
        print(
            "- per seed, SCTrilemma / scVI NMI and ARI: "
            + "; ".join(
                f"{seed}: {s[('X_sctrilemma', 'nmi')]:.3f} / {s[('X_scvi', 'nmi')]:.3f}, "
                f"{s[('X_sctrilemma', 'ari')]:.3f} / {s[('X_scvi', 'ari')]:.3f}"
                for seed, s in sorted(with_stop.items())
            )
        )
        print("\nBars on the six seeds' means:\n")
        print("\n".join(f"- {line}" for line in bars(with_stop)) + "\n")
    without = scores(load("runs_baron.json", "runs_baron_seeds_3_4.json"))
    with_stop = scores(load("with_stop/runs_baron.json", "with_stop/runs_baron_seeds_3_5.json"))
    seeds = sorted(set(without) & set(with_stop))
    print(f"## baron: the early stop's effect, without minus with, seeds {seeds}\n")
    for metric in METRICS:
        diff = [without[s][("X_sctrilemma", metric)] - with_stop[s][("X_sctrilemma", metric)] for s in seeds]
        print(f"- {metric}: {np.mean(diff):+.3f} ± {np.std(diff, ddof=1):.3f}")


if __name__ == "__main__":
    main()
