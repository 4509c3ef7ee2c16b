"""glibc allocator settings side by side: training steps and embedding, each setting in a fresh process.

Settings: ``tuned`` (sctrilemma raises glibc's mmap/trim thresholds, as ``train`` does), ``glibc`` (the defaults,
``SCTRILEMMA_TUNE_MALLOC=0``) and ``fixed`` (fixed 128 KiB thresholds). For each, a child process times
``--steps`` small-preset training steps on the shipped example data, and embedding of the 3,000 example cells with
the shipped reference after raising the thresholds (``tuned``) or not; it reports peak RSS. Rounds alternate the
settings so that load changes hit all of them alike.

Usage: ``python benchmarks/allocator.py [--quick] [--rounds 2] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SETTINGS = {
    "tuned": {"SCTRILEMMA_TUNE_MALLOC": "1"},
    "glibc": {"SCTRILEMMA_TUNE_MALLOC": "0"},
    "fixed": {"SCTRILEMMA_TUNE_MALLOC": "0", "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"},
}


def child(task: str, steps: int) -> dict:
    """Run one measurement in this process and return its figures."""
    import sctrilemma
    from sctrilemma._allocator import retain_freed_memory

    adata = sctrilemma.data.load_example()
    if task == "train":
        sctrilemma.SCTrilemma.setup_anndata(adata, donor_key="donor")
        sctrilemma.SCTrilemma(adata, preset="small").train(max_steps=3, batch_size=256, enable_progress_bar=False)
        model = sctrilemma.SCTrilemma(adata, preset="small")
        start = time.perf_counter()
        model.train(max_steps=steps, batch_size=256, enable_progress_bar=False)
        seconds = (time.perf_counter() - start) / steps
    else:
        model = sctrilemma.SCTrilemma.load_query_data(adata, sctrilemma.data.example_reference_dir())
        retain_freed_memory()  # a no-op unless SCTRILEMMA_TUNE_MALLOC=1, as after training in the same process
        model.get_latent_representation()
        start = time.perf_counter()
        model.get_latent_representation()
        seconds = time.perf_counter() - start
    status = open("/proc/self/status").read()
    peak_mb = int(status.split("VmHWM:")[1].split()[0]) / 1024
    return {"seconds": seconds, "peak_rss_mb": peak_mb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1 round, 10 training steps")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", nargs=2, metavar=("TASK", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return
    rounds, steps = (1, 10) if args.quick else (args.rounds, args.steps)
    results: dict[str, dict[str, list[dict]]] = {s: {"train": [], "embed": []} for s in SETTINGS}
    for _ in range(rounds):
        for task in ("train", "embed"):
            for setting, env in SETTINGS.items():
                out = subprocess.run(
                    [sys.executable, __file__, "--child", task, str(steps)],
                    env={**os.environ, **env},
                    capture_output=True,
                    text=True,
                    check=True,
                )
                results[setting][task].append(json.loads(out.stdout.strip().splitlines()[-1]))
    summary = {}
    print(f"{'setting':8} {'train s/step':>12} {'embed 3k cells s':>17} {'peak RSS embed MB':>18}")
    for setting, tasks in results.items():
        train = min(r["seconds"] for r in tasks["train"])
        embed = min(r["seconds"] for r in tasks["embed"])
        peak = max(r["peak_rss_mb"] for r in tasks["embed"])
        summary[setting] = {"train_s_per_step": train, "embed_s": embed, "embed_peak_rss_mb": peak}
        print(f"{setting:8} {train:12.2f} {embed:17.2f} {peak:18.0f}")
    base = summary["glibc"]
    for setting in ("tuned", "fixed"):
        summary[setting]["train_speedup_vs_glibc"] = base["train_s_per_step"] / summary[setting]["train_s_per_step"]
        summary[setting]["embed_speedup_vs_glibc"] = base["embed_s"] / summary[setting]["embed_s"]
        print(
            f"{setting} vs glibc: training {summary[setting]['train_speedup_vs_glibc']:.2f}x, "
            f"embedding {summary[setting]['embed_speedup_vs_glibc']:.2f}x"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rounds": rounds, "steps": steps, "settings": summary}, handle, indent=2)


if __name__ == "__main__":
    main()
