"""Training throughput: SCTrilemma's small preset against scVI in cells per second, and where a step's time goes.

Each measurement is a fresh process with torch's thread count pinned (``--threads``, default 1), on a shared data
set (default Kang 2018, 2,511 genes, and CellBench, 27,952 genes), as a user trains: ``train(max_steps=N)`` with each
model's defaults (SCTrilemma at batch 64, scVI at 128), early stopping off. A callback times every step; the first
20 are dropped. Rounds alternate the methods so that a change of load hits both. ``--baseline-src`` adds the same
SCTrilemma measurement with another checkout's ``src`` (a ``git worktree`` of an earlier commit).

Then, per data set, one process profiles a small-preset training step on a real batch (the module after two
training steps, so the gene start, the encoder's genes and the gene detection are in place): the per-gene work on
the dense ``(batch, genes)`` counts (thinning, the encoder's crop, the decoder's targets, the detection counts), the
rest of the forward pass, the backward pass and the optimiser's step, medians over ``--profile-steps``. The matrix
products' FLOPs of forward and backward (``torch.utils.flop_counter``) over their time give GFLOP/s, and its share
of the fp32 GEMM rate measured in the same process at the same threads.

Usage: ``python benchmarks/training_throughput.py [--threads 1] [--rounds 2] [--steps 150] [--datasets kang
cellbench] [--baseline-src DIR] [--json PATH]``; ``--report PATH`` prints the tables of a saved ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _speed import OUTPUT, REAL_DATASETS, SHARED_DATA  # noqa: E402

WARM_UP_STEPS = 20
BATCH_SIZE = {"sctrilemma": 64, "scvi": 128}


def _load(dataset: str):
    import anndata as ad

    return ad.read_h5ad(SHARED_DATA / REAL_DATASETS[dataset])


def train_child(method: str, dataset: str, threads: int, steps: int) -> dict:
    """Train ``steps`` steps as a user would; seconds per step and cells per second."""
    import warnings

    import scvi
    import torch
    from lightning.pytorch.callbacks import Callback

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    adata = _load(dataset)
    scvi.settings.seed = 0

    class StepTimes(Callback):
        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            self.seconds.append(time.perf_counter() - self.start)

    times = StepTimes()
    kwargs = {"max_steps": steps, "early_stopping": False, "enable_progress_bar": False, "callbacks": [times]}
    if method == "scvi":
        scvi.model.SCVI.setup_anndata(adata)
        model = scvi.model.SCVI(adata)
    else:
        import sctrilemma

        sctrilemma.SCTrilemma.setup_anndata(adata)
        model = sctrilemma.SCTrilemma(adata, preset="small")
    start = time.perf_counter()
    model.train(**kwargs)
    fit_s = time.perf_counter() - start
    step_s = statistics.median(times.seconds[WARM_UP_STEPS:])
    batch = BATCH_SIZE[method]
    return {
        "method": method,
        "dataset": dataset,
        "threads": torch.get_num_threads(),
        "steps": len(times.seconds),
        "step_s": step_s,
        "cells_per_s": batch / step_s,
        "fit_cells_per_s": batch * len(times.seconds) / fit_s,
    }


def profile_child(dataset: str, threads: int, n_steps: int) -> dict:
    """Where a small-preset training step's time goes, on one real batch."""
    import warnings

    import torch
    from roofline import gemm_gflops
    from scvi import REGISTRY_KEYS
    from torch.utils.flop_counter import FlopCounterMode

    import sctrilemma
    from sctrilemma.module._inputs import encoder_training_input, expressed_crop, target_sample

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    adata = _load(dataset)
    sctrilemma.SCTrilemma.setup_anndata(adata)
    model = sctrilemma.SCTrilemma(adata, preset="small")
    model.train(max_steps=2, early_stopping=False, enable_progress_bar=False)
    torch.set_num_threads(threads)
    module = model.module.train()
    optimizer = model.trainer.optimizers[0]
    batch = next(iter(model._make_data_loader(adata=adata, batch_size=BATCH_SIZE["sctrilemma"], shuffle=True)))
    x = batch[REGISTRY_KEYS.X_KEY]

    def per_gene_work() -> None:
        read, _ = encoder_training_input(
            x, module.min_depth_fraction, module.gene_panel_min_fraction, module._encoder_genes()
        )
        expressed_crop(read, module.crop_size, random_ties=True)
        module.gene_detection.update(x)
        target_sample(x, module.n_decoder_targets, rare_genes=module.gene_detection.rare_genes())

    seconds: dict[str, list[float]] = {"per_gene_work": [], "forward": [], "backward": [], "optimizer": []}
    for step in range(n_steps + 2):
        start = time.perf_counter()
        per_gene_work()
        per_gene = time.perf_counter() - start
        start = time.perf_counter()
        _, _, loss = module(batch, loss_kwargs={"kl_weight": 5e-4})
        forward = time.perf_counter() - start
        optimizer.zero_grad()
        start = time.perf_counter()
        loss.loss.backward()
        backward = time.perf_counter() - start
        start = time.perf_counter()
        optimizer.step()
        if step >= 2:
            seconds["per_gene_work"].append(per_gene)
            seconds["forward"].append(forward)
            seconds["backward"].append(backward)
            seconds["optimizer"].append(time.perf_counter() - start)
    optimizer.zero_grad()
    with FlopCounterMode(display=False) as counter:
        _, _, loss = module(batch, loss_kwargs={"kl_weight": 5e-4})
        loss.loss.backward()
    optimizer.zero_grad()
    median = {name: statistics.median(values) for name, values in seconds.items()}
    median["forward_without_per_gene_work"] = median["forward"] - median["per_gene_work"]
    matmul_s = median["forward_without_per_gene_work"] + median["backward"]
    flops = counter.get_total_flops()
    gemm = gemm_gflops(4096, 2048, 2048, torch.float32, 2.0)
    return {
        "dataset": dataset,
        "threads": threads,
        "n_genes": adata.n_vars,
        "batch": x.shape[0],
        "seconds": median,
        "matmul_gflop_per_step": flops / 1e9,
        "model_gflop_per_s": flops / 1e9 / matmul_s,
        "gemm_gflops_fp32": gemm,
        "share_of_gemm_rate": flops / 1e9 / matmul_s / gemm,
        "optimizer_fused": bool(optimizer.param_groups[0].get("fused")),
    }


def run_child(args: list[str], threads: int, src: str | None) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    command = [sys.executable, __file__, *args, "--threads", str(threads)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    row["load_after"] = os.getloadavg()[0]
    return row


def _stat(values: list[float], digits: int = 0) -> str:
    text = f"{statistics.mean(values):.{digits}f}"
    return text + (f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else "")


def report(rows: list[dict], profiles: list[dict]) -> str:
    lines = ["| data set | variant | s per step | cells/s (steps) | cells/s (whole fit) | scVI's cells/s over ours |"]
    lines.append("|---|---|---|---|---|---|")
    for dataset in dict.fromkeys(row["dataset"] for row in rows):
        runs = [row for row in rows if row["dataset"] == dataset]
        scvi = [row["cells_per_s"] for row in runs if row["variant"] == "scvi"]
        for variant in dict.fromkeys(row["variant"] for row in runs):
            mine = [row for row in runs if row["variant"] == variant]
            speed = [row["cells_per_s"] for row in mine]
            ratio = "–" if variant == "scvi" or not scvi else f"{statistics.mean(scvi) / statistics.mean(speed):.1f}x"
            steps = _stat([row["step_s"] for row in mine], 3)
            fit = _stat([row["fit_cells_per_s"] for row in mine])
            lines.append(f"| {dataset} | {variant} | {steps} | {_stat(speed)} | {fit} | {ratio} |")
    if profiles:
        lines += [
            "",
            "| data set | genes | per-gene work ms | rest of forward ms | backward ms | optimiser ms |"
            " matmul GFLOP/step | GFLOP/s | share of GEMM rate |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for p in profiles:
            s = {name: 1e3 * value for name, value in p["seconds"].items()}
            lines.append(
                f"| {p['dataset']} | {p['n_genes']} | {s['per_gene_work']:.0f} | {s['forward_without_per_gene_work']:.0f}"
                f" | {s['backward']:.0f} | {s['optimizer']:.1f} | {p['matmul_gflop_per_step']:.2f}"
                f" | {p['model_gflop_per_s']:.0f} | {p['share_of_gemm_rate']:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=150, help="training steps per run")
    parser.add_argument("--profile-steps", type=int, default=10)
    parser.add_argument("--datasets", nargs="+", default=["kang", "cellbench"], choices=sorted(REAL_DATASETS))
    parser.add_argument("--baseline-src", default=None, help="another checkout's src directory, measured beside")
    parser.add_argument("--quick", action="store_true", help="one round of 40 steps, Kang only")
    parser.add_argument("--json", type=Path, default=OUTPUT / "training_throughput.json")
    parser.add_argument("--report", type=Path, default=None, help="print the tables of a saved --json file")
    parser.add_argument("--child", nargs="+", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        kind, *rest = args.child
        if kind == "train":
            method, dataset, steps = rest
            print(json.dumps(train_child(method, dataset, args.threads, int(steps))))
        else:
            print(json.dumps(profile_child(rest[0], args.threads, args.profile_steps)))
        return
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(report(saved["rows"], saved["profiles"]))
        return
    if args.quick:
        args.rounds, args.steps, args.datasets = 1, 40, ["kang"]
    variants = [("sctrilemma", "sctrilemma", None), ("scvi", "scvi", None)]
    if args.baseline_src is not None:
        variants.insert(1, ("sctrilemma_baseline", "sctrilemma", args.baseline_src))
    rows, profiles = [], []
    for round_ in range(args.rounds):
        for dataset in args.datasets:
            for variant, method, src in variants:
                child = ["--child", "train", method, dataset, str(args.steps)]
                row = {"variant": variant, "round": round_, **run_child(child, args.threads, src)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    for dataset in args.datasets:
        child = ["--profile-steps", str(args.profile_steps), "--child", "profile", dataset]
        profiles.append(run_child(child, args.threads, None))
        print(json.dumps(profiles[-1]), flush=True)
    print(report(rows, profiles))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows, "profiles": profiles}, indent=1))


if __name__ == "__main__":
    main()
