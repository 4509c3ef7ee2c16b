"""Scratch: the screen's per-seed headline figures beside the forty-first round's trilemma runs (same seeds, machine).

Usage (repository root): ``python .../compare.py noffn_seed0.jsonl noffn_seed1.jsonl``.
"""

import json
import sys

BASE_DIR = "benchmarks/results/trilemma/intel_29nov/"
FILES = {
    "zilionis2019_mouse_lung_cluey.h5ad": "runs_zilionis.json",
    "baron2016_pancreas_subset_cider.h5ad": "runs_baron.json",
    "kang2018_pbmc_ctrl.h5ad": "runs_kang.json",
    "cellbench_lung_celllines.h5ad": "runs_cellbench.json",
}
METRICS = ["nmi", "ari", "bras", "depth_r2", "logfc_spearman"]


def base(dataset: str, seed: int, method: str) -> tuple[dict, int | None]:
    """A method's headline figures and steps in the forty-first round's run of ``seed``."""
    for run in json.load(open(BASE_DIR + FILES[dataset])):
        if run["seed"] == seed:
            figures = {r["metric"]: r["mean"] for r in run["results"] if r["method"] == method}
            return figures, run["budgets"].get(method, {}).get("steps")
    return {}, None


rows = [json.loads(line) for path in sys.argv[1:] for line in open(path) if line.startswith("{")]
for row in rows:
    ours, steps = base(row["data"], row["seed"], "X_sctrilemma")
    scvi, _ = base(row["data"], row["seed"], "X_scvi")
    print(f"{row['data'][:10]} s{row['seed']} steps {row.get('steps')} (base {steps})")
    for metric in METRICS:
        values = (row.get(metric, float("nan")), ours.get(metric, float("nan")), scvi.get(metric, float("nan")))
        print(f"   {metric:15s} {values[0]:.3f}  base {values[1]:.3f}  scVI {values[2]:.3f}")
