"""Small-preset training step on the shipped example at batch 128: the code of an earlier commit against today's.

By default the baseline is commit ``5758b7f``, the code when issue 14 was filed (its own small preset: dropout 0.1,
crop 512, the crop as decoder targets, feed-forward width 4 x d). The baseline's ``src/`` is extracted with
``git archive`` into a temporary directory and each side runs in its own subprocess on the same 128 cells, the
two alternating round by round so that load changes hit both alike. A step is forward, backward and an AdamW
update; each subprocess drops its first step as warm-up. Prints the median seconds per step, the ratio and the
machine's load.

With ``--settings`` (JSON: name -> overrides of ``PRESETS["small"]``) settings of today's code are compared in
one process instead, steps interleaved, the first setting as the reference, on ``--batch`` cells of ``--data``
(a file of ``--data-dir``; default the shipped example).

``--tune-malloc`` keeps freed memory for reuse in both sides (glibc's ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` raised through the environment); without it each step may also pay the page faults of
fresh activation memory.

Usage: ``python benchmarks/training_step.py [--steps 8] [--rounds 3] [--threads N] [--baseline COMMIT]
[--tune-malloc] [--json PATH]``; ``python benchmarks/training_step.py --threads 1 --batch 64 --data
kang2018_pbmc_ctrl.h5ad --settings '{"T128": {"n_decoder_targets": 128, "ffn_multiplier": 4}, "T512": {}}'``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# glibc keeps freed blocks for reuse instead of unmapping them after every step (``--tune-malloc``).
RETAIN_FREED_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str((1 << 31) - 1)}

# Run by each subprocess against the ``sctrilemma`` on its ``PYTHONPATH``: prints seconds per step as JSON.
STEP_TIMER = """
import json, sys, time
import torch
from scvi import REGISTRY_KEYS
import sctrilemma
from sctrilemma.model._presets import PRESETS
from sctrilemma.module import SCTrilemmaModule
n_steps, batch_size, threads = (int(value) for value in sys.argv[1:4])
if threads:
    torch.set_num_threads(threads)
adata = sctrilemma.data.load_example()
x = torch.as_tensor(adata.X[:batch_size].toarray(), dtype=torch.float32)
torch.manual_seed(0)
module = SCTrilemmaModule(x.shape[1], **PRESETS["small"], prior="normal")
module.train()
optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
seconds = []
for _ in range(n_steps + 1):
    start = time.perf_counter()
    _, _, loss = module({REGISTRY_KEYS.X_KEY: x})
    optimizer.zero_grad()
    loss.loss.backward()
    optimizer.step()
    seconds.append(time.perf_counter() - start)
print(json.dumps(seconds[1:]))
"""


def subprocess_steps(
    src: Path, n_steps: int, batch_size: int, threads: int | None, tune_malloc: bool = False
) -> list[float]:
    """Seconds per training step of the package under ``src``, timed in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(src), **(RETAIN_FREED_MEMORY if tune_malloc else {})}
    command = [sys.executable, "-c", STEP_TIMER, str(n_steps), str(batch_size), str(threads or 0)]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def compare_commits(
    baseline: str, n_steps: int, n_rounds: int, batch_size: int, threads: int | None, tune_malloc: bool = False
) -> dict:
    """Median seconds per step of ``baseline``'s code and today's, alternating subprocesses round by round."""
    seconds: dict[str, list[float]] = {baseline: [], "current": []}
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", baseline, "src"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        sources = {baseline: Path(tmp) / "src", "current": ROOT / "src"}
        for _ in range(n_rounds):
            for name, src in sources.items():
                seconds[name] += subprocess_steps(src, n_steps, batch_size, threads, tune_malloc)
    return seconds


def compare_settings(settings: str, data: str | None, data_dir: str, batch_size: int, n_steps: int) -> dict:
    """Seconds per step of settings of today's small preset, steps interleaved in this process."""
    import anndata as ad
    import torch
    from scvi import REGISTRY_KEYS

    import sctrilemma
    from sctrilemma.model._presets import PRESETS
    from sctrilemma.module import SCTrilemmaModule

    adata = sctrilemma.data.load_example() if data is None else ad.read_h5ad(Path(data_dir) / data)
    batch = {REGISTRY_KEYS.X_KEY: torch.as_tensor(adata.X[:batch_size].toarray(), dtype=torch.float32)}
    runs = {}
    for name, overrides in json.loads(settings).items():
        torch.manual_seed(0)
        module = SCTrilemmaModule(adata.n_vars, **{**PRESETS["small"], **overrides}, prior="normal")
        module.train()
        runs[name] = (module, torch.optim.AdamW(module.parameters(), lr=1e-3))
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(n_steps + 1):  # the first step of each warms up and is dropped
        for name, (module, optimizer) in runs.items():
            start = time.perf_counter()
            _, _, loss = module(batch)
            optimizer.zero_grad()
            loss.loss.backward()
            optimizer.step()
            seconds[name].append(time.perf_counter() - start)
    return {name: values[1:] for name, values in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per subprocess (or per setting)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating subprocess rounds per side")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--baseline", default="5758b7f", help="commit whose code is the baseline")
    parser.add_argument("--data", default=None, help="with --settings: an h5ad file in --data-dir")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--settings", default=None, help="JSON: name -> overrides of the small preset")
    parser.add_argument(
        "--tune-malloc",
        action="store_true",
        help="raise glibc's mmap/trim thresholds in both subprocesses, as `train` does in both codes",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    if args.settings is None:
        seconds = compare_commits(args.baseline, args.steps, args.rounds, args.batch, args.threads, args.tune_malloc)
    else:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        if args.tune_malloc:
            parser.error(
                "--tune-malloc runs subprocesses (--baseline); with --settings set the variables of "
                "RETAIN_FREED_MEMORY in the environment instead"
            )
        seconds = compare_settings(args.settings, args.data, args.data_dir, args.batch, args.steps)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    first = next(iter(medians))
    result = {
        "seconds_per_step": medians,
        "speedup": {name: medians[first] / value for name, value in medians.items()},
        "threads": args.threads or "torch default",
        "tune_malloc": args.tune_malloc,
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "steps": args.steps,
        "batch": args.batch,
        "data": args.data or "shipped example",
    }
    for name, value in medians.items():
        print(f"{name}: {value:.3f} s/step, {result['speedup'][name]:.2f}x faster than {first}")
    print(f"({result['threads']} threads, load {load_before:.1f} -> {result['load_average_1min'][1]:.1f})")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
