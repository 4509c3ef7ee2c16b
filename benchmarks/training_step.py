"""Small-preset training step on the shipped example at batch 128: the previous recipe against today's, side by side.

"previous" is the small preset as it was before the decoder-target change (dropout 0.1, crop 512, the paper's
crop as decoder targets); "current" is ``PRESETS["small"]``. Both run in one process on the same 128 cells,
alternating step by step so that load changes hit both alike; each step is forward, backward and an AdamW update.
Prints median seconds per step, the ratio and the machine's load.

Usage: ``python benchmarks/training_step.py [--steps 12] [--threads N] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from scvi import REGISTRY_KEYS

import sctrilemma
from sctrilemma.model._presets import PRESETS
from sctrilemma.module import SCTrilemmaModule

PREVIOUS_SMALL = {
    **PRESETS["small"],
    "dropout_rate": 0.1,
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
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    adata = sctrilemma.data.load_example()
    x = torch.as_tensor(adata.X[:128].toarray(), dtype=torch.float32)
    load_before = os.getloadavg()[0]
    seconds = timed_steps({"previous": PREVIOUS_SMALL, "current": PRESETS["small"]}, x, args.steps)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    result = {
        "seconds_per_step": medians,
        "speedup": medians["previous"] / medians["current"],
        "threads": torch.get_num_threads(),
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "steps": args.steps,
    }
    print(f"previous {medians['previous']:.3f} s/step, current {medians['current']:.3f} s/step, "
          f"speed-up {result['speedup']:.2f}x ({result['threads']} threads, load {load_before:.1f})")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
