"""Scratch: the screen's per-seed headline figures beside the 41st round's trilemma runs (same seeds, same machine)."""
import json, glob, sys
base_dir = "benchmarks/results/trilemma/intel_29nov/"
files = {"zilionis2019_mouse_lung_cluey.h5ad": "runs_zilionis.json", "baron2016_pancreas_subset_cider.h5ad": "runs_baron.json",
         "kang2018_pbmc_ctrl.h5ad": "runs_kang.json", "cellbench_lung_celllines.h5ad": "runs_cellbench.json"}
M = ["nmi", "ari", "bras", "depth_r2", "logfc_spearman"]
def base(ds, seed, method):
    for r in json.load(open(base_dir + files[ds])):
        if r["seed"] == seed:
            out = {m: x["mean"] for x in r["results"] if x["method"] == method for m in [x["metric"]] if m in M}
            steps = r["budgets"].get(method, {}).get("steps")
            return out, steps
    return None, None
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.startswith("{")]
for r in rows:
    b, bsteps = base(r["data"], r["seed"], "X_sctrilemma")
    s, _ = base(r["data"], r["seed"], "X_scvi")
    print(f'{r["data"][:10]} s{r["seed"]} steps {r.get("steps")} (base {bsteps})')
    for m in M:
        print(f'   {m:15s} {r.get(m, float("nan")):.3f}  base {b.get(m, float("nan")) if b else float("nan"):.3f}  scVI {s.get(m, float("nan")) if s else float("nan"):.3f}')
