"""Small-preset training step on the shipped example at batch 128: the previous recipe against today's, side by side.

"previous" is the small preset as it was before the decoder-target change (dropout 0.1, crop 512, the paper's
crop as decoder targets, feed-forward width 4 x d); "current" is ``PRESETS["small"]``. Both run in one process on
the same 128 cells, alternating step by step so that load changes hit both alike; each step is forward, backward and an AdamW update.
Prints median seconds per step, the ratio and the machine's load.

With ``--settings`` (JSON: name -> overrides of ``PRESETS["small"]``) those settings are compared instead, the first
as the reference, on ``--batch`` cells of ``--data`` (a file of ``--data-dir``; default the shipped example).

Usage: ``python benchmarks/training_step.py [--steps 12] [--threads N] [--json PATH]``;
``python benchmarks/training_step.py --threads 1 --batch 64 --data kang2018_pbmc_ctrl.h5ad --settings
'{"T128": {"n_decoder_targets": 128, "ffn_multiplier": 4}, "T512": {}}'``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import anndata as ad
import torch
from scvi import REGISTRY_KEYS

import sctrilemma
from sctrilemma.model._presets import PRESETS
from sctrilemma.module import SCTrilemmaModule

PREVIOUS_SMALL = {
    **PRESETS["small"],
    "dropout_rate": 0.1,
    "ffn_multiplier": 4.0,
    "crop_size": 512,
    "n_decoder_targets": None,
    "posterior_logvar_init": 0.0,
}


def timed_steps(configs: dict[str, dict], x: torch.Tensor, n_steps: int) -> dict[str, list[float]]:
    """Seconds per training step of each configuration, interleaved."""
    batch = {REGISTRY_KEYS.X_KEY: x}
    runs = {}
    for name, sizes in configs.items():
        torch.manual_seed(0)
        module = SCTrilemmaModule(x.shape[1], **sizes, prior="normal")
        module.train()
        runs[name] = (module, torch.optim.AdamW(module.parameters(), lr=1e-3))
    seconds: dict[str, list[float]] = {name: [] for name in configs}
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
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--data", default=None, help="an h5ad file in --data-dir (default: the shipped example)")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--settings", default=None, help="JSON: name -> overrides of the small preset")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    adata = sctrilemma.data.load_example() if args.data is None else ad.read_h5ad(Path(args.data_dir) / args.data)
    x = torch.as_tensor(adata.X[: args.batch].toarray(), dtype=torch.float32)
    if args.settings is None:
        configs = {"previous": PREVIOUS_SMALL, "current": PRESETS["small"]}
    else:
        configs = {name: {**PRESETS["small"], **overrides} for name, overrides in json.loads(args.settings).items()}
    load_before = os.getloadavg()[0]
    seconds = timed_steps(configs, x, args.steps)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    first = next(iter(medians))
    result = {
        "seconds_per_step": medians,
        "speedup": {name: medians[first] / value for name, value in medians.items()},
        "threads": torch.get_num_threads(),
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "steps": args.steps,
        "batch": args.batch,
        "data": args.data or "shipped example",
    }
    for name, value in medians.items():
        print(f"{name}: {value:.3f} s/step, {result['speedup'][name]:.2f}x faster than {first}")
    print(f"({result['threads']} threads, load {load_before:.1f})")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
