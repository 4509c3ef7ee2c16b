"""Screen rows without the stop, paired by seed with the trilemma benchmark's runs of the preset on this EPYC.

The benchmark's runs (`../../trilemma/epyc_2dec/`, seeds 0-5, and for Baron and Zilionis
`../../trilemma/epyc_4dec_seeds_6_11/`, seeds 6-11) give, per seed, the preset with its stop, scVI and PCA. Usage
(from the repository root; ``kang``, ``cellbench``, ``baron`` or ``zilionis``)::

    python benchmarks/results/quality/early_stop_epyc/pair_with_benchmark.py baron ROWS.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

TRILEMMA = Path(__file__).parents[2] / "trilemma"
METRICS = ("nmi", "ari", "bras", "depth_r2", "logfc_spearman")


def benchmark_runs(name: str) -> dict[int, dict[tuple[str, str], float]]:
    """Per seed, each (method, metric)'s mean in the benchmark's runs of data set ``name``."""
    files = [TRILEMMA / "epyc_2dec" / f"runs_{name}.json"]
    files += [TRILEMMA / "epyc_4dec_seeds_6_11" / part / f"runs_{name}.json" for part in ("p1", "p2")]
    runs = [run for path in files if path.exists() for run in json.loads(path.read_text())]
    return {run["seed"]: {(r["method"], r["metric"]): r["mean"] for r in run["results"]} for run in runs}


def main(name: str, rows_path: str) -> None:
    rows = sorted((json.loads(line) for line in open(rows_path)), key=lambda row: row["seed"])
    bench = benchmark_runs(name)
    rows = [row for row in rows if row["seed"] in bench]
    print(f"seeds {[row['seed'] for row in rows]}, steps {[row['steps'] for row in rows]}\n")
    print("| metric | without the stop | preset (with it) | scVI | bar | paired, without minus with | above scVI's |")
    print("|---|---|---|---|---|---|---|")
    for metric in METRICS:
        ours = [row[metric] for row in rows]
        preset = [bench[row["seed"]][("X_sctrilemma", metric)] for row in rows]
        scvi = [bench[row["seed"]][("X_scvi", metric)] for row in rows]
        diff = [a - b for a, b in zip(ours, preset, strict=True)]
        if metric in ("nmi", "ari"):
            pca = [bench[row["seed"]][("X_pca", metric)] for row in rows]
            bar = f"≥ {max(statistics.mean(scvi), statistics.mean(pca)) - 0.02:.3f}"
        elif metric == "depth_r2":
            bar = f"≤ {statistics.mean(scvi):.3f}"
        elif metric == "logfc_spearman":
            bar = f"≥ {statistics.mean(scvi) - 0.05:.3f}"
        else:
            bar = f"≥ {statistics.mean(scvi):.3f}"
        above = sum(a > b for a, b in zip(ours, scvi, strict=True))
        cells = [f"{statistics.mean(v):.3f} ± {statistics.stdev(v):.3f}" for v in (ours, preset, scvi)]
        paired = f"{statistics.mean(diff):+.3f} ± {statistics.stdev(diff):.3f}"
        print(f"| {metric} | {' | '.join(cells)} | {bar} | {paired} | {above} of {len(rows)} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
