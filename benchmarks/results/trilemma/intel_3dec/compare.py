"""The benchmark without the early stop: its summary, the bars of issue 31, and the paired effect of the stop.

Usage (from the repository root)::

    PYTHONPATH=benchmarks python benchmarks/results/trilemma/intel_3dec/compare.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from trilemma import summarize

HERE = Path(__file__).parent
NAMES = ("kang", "cellbench", "baron", "zilionis")
STOPPED = ("baron", "zilionis")  # also run with the stop, in with_stop/
METRICS = ("nmi", "ari", "bras", "depth_r2", "logfc_spearman")


def scores(runs: list[dict]) -> dict[int, dict[tuple[str, str], float]]:
    """Per seed, each (method, metric)'s scorecard mean."""
    return {run["seed"]: {(r["method"], r["metric"]): r["mean"] for r in run["results"]} for run in runs}


def bars(by_seed: dict[int, dict]) -> list[str]:
    """Issue 31's bars on the seeds' means: identity against the better of scVI and PCA, the rest against scVI."""
    mean = {key: np.mean([s[key] for s in by_seed.values()]) for key in next(iter(by_seed.values()))}
    ours = {m: mean[("X_sctrilemma", m)] for m in METRICS}
    scvi = {m: mean[("X_scvi", m)] for m in METRICS}
    lines = []
    for m in ("nmi", "ari"):
        floor = max(scvi[m], mean[("X_pca", m)]) - 0.02
        lines.append(f"{m} {ours[m]:.3f} >= {floor:.3f}: {'met' if ours[m] >= floor else 'MISSED'}")
    checks = {
        "bras": ours["bras"] >= scvi["bras"],
        "depth_r2": ours["depth_r2"] <= scvi["depth_r2"],
        "logfc_spearman": ours["logfc_spearman"] >= scvi["logfc_spearman"] - 0.05,
    }
    for m, met in checks.items():
        lines.append(f"{m} {ours[m]:.3f} vs scVI {scvi[m]:.3f}: {'met' if met else 'MISSED'}")
    return lines


def main() -> None:
    runs = {name: json.loads((HERE / f"runs_{name}.json").read_text()) for name in NAMES}
    with_stop = {name: scores(json.loads((HERE / "with_stop" / f"runs_{name}.json").read_text())) for name in STOPPED}
    baron_seeds_3_4 = json.loads((HERE / "runs_baron_seeds_3_4.json").read_text())
    print(summarize([run for name in NAMES for run in runs[name]], 240.0, {"train": {"early_stopping": False}}))
    for name in NAMES:
        print(f"\n## {name}: bars\n")
        print("\n".join(f"- {line}" for line in bars(scores(runs[name]))))
    print("\n## baron, seeds 0-4 (with runs_baron_seeds_3_4.json): bars\n")
    print("\n".join(f"- {line}" for line in bars(scores(runs["baron"] + baron_seeds_3_4))))
    for name in STOPPED:
        without = scores(runs[name])
        seeds = sorted(set(without) & set(with_stop[name]))
        print(f"\n## {name}: the early stop's effect, without minus with, seeds {seeds}\n")
        for m in METRICS:
            diff = [without[s][("X_sctrilemma", m)] - with_stop[name][s][("X_sctrilemma", m)] for s in seeds]
            print(f"- {m}: {np.mean(diff):+.3f} ± {np.std(diff, ddof=1):.3f}")
        print("\nWith the stop, bars against its own run's scVI and PCA:\n")
        print("\n".join(f"- {line}" for line in bars(with_stop[name])))


if __name__ == "__main__":
    main()
