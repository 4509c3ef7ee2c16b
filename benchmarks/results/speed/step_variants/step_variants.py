"""Scratch: small-preset training steps with exact variants of the embedding lookups and the decoding groups.

One process, one thread, one batch of 64 cells; the variants alternate within each round, so that a machine's drift
falls on all of them. Prints one JSON line per variant: seconds per step per round, and the ratio to ``shipped``.

Usage (repository root): ``python .../step_variants.py kang [--rounds 6 --steps 8]``.
"""

import argparse
import json
import statistics
import sys
import time
import warnings

import torch
from torch import nn

sys.path.insert(0, "benchmarks")
from training_throughput import _load

import sctrilemma
from sctrilemma.module import _decoder

warnings.filterwarnings("ignore")
parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.add_argument("--rounds", type=int, default=6)
parser.add_argument("--steps", type=int, default=8)
args = parser.parse_args()
torch.set_num_threads(1)
adata = _load(args.data)
sctrilemma.SCTrilemma.setup_anndata(adata)
model = sctrilemma.SCTrilemma(adata, preset="small")
model.train(max_steps=2, early_stopping=False, enable_progress_bar=False)
torch.set_num_threads(1)
module = model.module.train()
optimizer = model.trainer.optimizers[0]
batch = next(iter(model._make_data_loader(adata=adata, batch_size=64, shuffle=True)))

EMBEDDING_FORWARD = nn.Embedding.forward
GENE_QUERIES = _decoder.ZINBDecoder.gene_queries


def lookup_by_index_select(self: nn.Embedding, genes: torch.Tensor) -> torch.Tensor:
    """The table's rows through ``index_select``, whose gradient is an ``index_add_``."""
    return self.weight.index_select(0, genes.reshape(-1)).view(*genes.shape, self.weight.shape[1])


def folded_gene_queries(self, genes: torch.Tensor, gene_embedding: nn.Embedding) -> torch.Tensor:
    """One lookup in the sum of the shared table (no gradient) and the decoder's offsets."""
    if self.gene_offset is None:
        return gene_embedding(genes)
    table = gene_embedding.weight.detach() + self.gene_offset.weight
    return table.index_select(0, genes.reshape(-1)).view(*genes.shape, table.shape[1])


VARIANTS = {
    "shipped": (EMBEDDING_FORWARD, GENE_QUERIES, 8192),
    "index_select": (lookup_by_index_select, GENE_QUERIES, 8192),
    "index_select+folded_queries": (lookup_by_index_select, folded_gene_queries, 8192),
    "decode_groups_4096": (EMBEDDING_FORWARD, GENE_QUERIES, 4096),
    "decode_groups_16384": (EMBEDDING_FORWARD, GENE_QUERIES, 16384),
}


def use(variant: str) -> None:
    embedding_forward, gene_queries, budget = VARIANTS[variant]
    nn.Embedding.forward = embedding_forward
    _decoder.ZINBDecoder.gene_queries = gene_queries
    _decoder.TRAINING_DECODE_BUDGET = budget


def step() -> None:
    _, _, loss = module(batch, loss_kwargs={"kl_weight": 5e-4})
    optimizer.zero_grad()
    loss.loss.backward()
    optimizer.step()


def check_gradients() -> dict[str, float]:
    """Largest gradient difference of each variant from the shipped code on one batch (dropout off, no step)."""
    dropouts = [m for m in module.modules() if isinstance(m, nn.Dropout)]
    rates = [m.p for m in dropouts]
    for m in dropouts:
        m.p = 0.0
    buffers = {name: buffer.clone() for name, buffer in module.named_buffers() if buffer is not None}
    differences = {}
    for variant in VARIANTS:
        use(variant)
        for name, buffer in module.named_buffers():  # the running gene counts move with each forward pass
            if buffer is not None:
                buffer.copy_(buffers[name])
        torch.manual_seed(0)
        _, _, loss = module(batch, loss_kwargs={"kl_weight": 5e-4})
        module.zero_grad()
        loss.loss.backward()
        grads = [p.grad.clone() for p in module.parameters() if p.grad is not None]
        if variant == "shipped":
            reference = grads
        differences[variant] = max(
            float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)) for a, b in zip(grads, reference, strict=True)
        )
    module.zero_grad()
    for m, rate in zip(dropouts, rates, strict=True):
        m.p = rate
    return differences


differences = check_gradients()
times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
for round_index in range(args.rounds):
    order = list(VARIANTS) if round_index % 2 == 0 else list(reversed(VARIANTS))
    for variant in order:
        use(variant)
        for _ in range(2):
            step()
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        times[variant].append((time.perf_counter() - start) / args.steps)
for variant, seconds in times.items():
    ratios = [a / b for a, b in zip(seconds, times["shipped"], strict=True)]
    row = {
        "data": args.data,
        "variant": variant,
        "s_per_step": [round(s, 4) for s in seconds],
        "mean_s": round(statistics.mean(seconds), 4),
        "ratio_to_shipped": round(statistics.mean(ratios), 3),
        "ratio_sd": round(statistics.stdev(ratios), 3),
        "max_gradient_difference": differences[variant],
    }
    print(json.dumps(row), flush=True)
