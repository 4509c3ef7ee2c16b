"""What each speed trick of the model buys today: the same work with the trick on and switched off, side by side.

Every trick computes the same function as the plain code it replaces (the tests check each against it); here each
one is switched off in turn and the work timed in one process, variants interleaved round by round so that load
changes hit all of them alike, at a pinned torch thread count. Reports the median seconds and the speed-up of the
trick (time without it / time with it).

- Training step (forward, backward and an AdamW update of ``--batch`` cells): the encoder's absorbed attention
  (``CrossAttention._absorbed_forward``), the decoder's folded attention (``_folded_forward``), the count head folded
  into the last feed-forward layer (``SwiGLU.read_out``), decoding in cache-sized groups of cells
  (``TRAINING_DECODE_BUDGET``) and the encoder's context normalised once for all blocks.
- Evaluation without autograd (the embedding of ``--cells`` cells; all genes of ``--decode-cells`` cells): the
  encoder's and the decoder's fast paths as a whole, the prepared encoder blocks (``LongContextBlock``), reused output
  buffers (``Workspace``) and blocks prepared once rather than per batch.

Usage::

    python benchmarks/speed_tricks.py --threads 1 --preset small --json benchmarks/output/speed_tricks_small.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from scvi import REGISTRY_KEYS

import sctrilemma
import sctrilemma.module._decoder as decoder_file
from sctrilemma.model import PRESETS
from sctrilemma.module import PerceiverEncoder, SCTrilemmaModule, ZINBDecoder, expressed_crop
from sctrilemma.nn import CrossAttention, CrossAttentionBlock
from sctrilemma.nn._attention import Workspace

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

OUTPUT = Path(__file__).resolve().parent / "output"  # raw output, git-ignored


def _unfused_readout(original: Callable) -> Callable:
    def forward(self, queries, context, context_mask=None, *, unit_context=False, readout=None):
        updated = original(self, queries, context, context_mask, unit_context=unit_context)
        return updated if readout is None else readout(updated)

    return forward


def _per_block_context_norm(self: PerceiverEncoder, crop, library):
    latents = self.latent_queries.expand(crop.genes.shape[0], -1, -1)
    tokens = self.tokens(crop, library)
    for block in self.blocks:
        latents = block(latents, tokens, crop.mask)
    return latents


def _fresh_buffer(self: Workspace, name: str, shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device)


def _unprepared(original: Callable) -> Callable:
    def prepared_blocks(self, dtype, device):
        self._prepared.clear()
        return original(self, dtype, device)

    return prepared_blocks


# trick -> (object, attribute, replacement given the original): the code with the trick switched off
TRAINING_TRICKS = {
    "absorbed encoder attention": (CrossAttention, "_absorbs_context", lambda _: lambda *args: False),
    "folded decoder attention": (CrossAttention, "_folds_context", lambda _: lambda *args: False),
    "count head folded into the last block": (CrossAttentionBlock, "forward", _unfused_readout),
    "decoding in groups of cells": (decoder_file, "TRAINING_DECODE_BUDGET", lambda _: 1 << 62),
    "context normalised once": (PerceiverEncoder, "_encode_plain", lambda _: _per_block_context_norm),
}
EMBEDDING_TRICKS = {
    "fast encoder path": (
        PerceiverEncoder, "_encode_fast", lambda _: lambda self, crop, library, dtype: self._encode_plain(crop, library)
    ),
    "prepared encoder blocks": (PerceiverEncoder, "_prepared_blocks", lambda _: lambda self, dtype, device: None),
    "reused buffers": (Workspace, "get", lambda _: _fresh_buffer),
    "encoder blocks prepared once": (PerceiverEncoder, "_prepared_blocks", _unprepared),
}  # fmt: skip
DECODING_TRICKS = {
    "fast decoder path": (
        ZINBDecoder, "_decode_fast",
        lambda _: lambda self, z, pooled, genes, table, dtype: self._decode_plain(z, pooled, genes, table, dtype),
    ),
    "reused buffers": EMBEDDING_TRICKS["reused buffers"],
    "decoder blocks prepared once": (ZINBDecoder, "_prepared_blocks", _unprepared),
}  # fmt: skip


@contextlib.contextmanager
def switched_off(trick: tuple | None) -> Iterator[None]:
    """The code with ``trick`` (an entry of the tables above) switched off, or as it is for ``None``."""
    if trick is None:
        yield
        return
    owner, name, replacement = trick
    original = getattr(owner, name)
    setattr(owner, name, replacement(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def interleaved(work: Callable[[], None], tricks: dict, rounds: int) -> dict[str, float]:
    """Median seconds of ``work`` with every trick on and with each switched off, variants interleaved."""
    variants = {"all tricks on": None, **{f"without {name}": trick for name, trick in tricks.items()}}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for round_index in range(rounds + 1):  # the first round warms up and is dropped
        for name, trick in variants.items():
            with switched_off(trick):
                start = time.perf_counter()
                work()
                elapsed = time.perf_counter() - start
            if round_index:
                seconds[name].append(elapsed)
    return {name: statistics.median(values) for name, values in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="small", choices=sorted(PRESETS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64, help="cells per training step")
    parser.add_argument("--cells", type=int, default=1024, help="cells embedded, in batches of 128")
    parser.add_argument("--decode-cells", type=int, default=128, help="cells whose every gene is decoded")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None, help="default: output/speed_tricks_PRESET.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    adata = sctrilemma.data.load_example()
    x = torch.as_tensor(adata.X[: max(args.cells, args.batch, args.decode_cells)].toarray(), dtype=torch.float32)
    torch.manual_seed(0)
    module = SCTrilemmaModule(x.shape[1], **PRESETS[args.preset]["model"], prior="normal")
    module.precision = "fp32"
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4)
    batch = {REGISTRY_KEYS.X_KEY: x[: args.batch]}

    def training_step() -> None:
        module.train()
        _, _, loss = module(batch)
        optimizer.zero_grad()
        loss.loss.backward()
        optimizer.step()

    @torch.no_grad()
    def embedding() -> None:
        module.eval()
        for start in range(0, args.cells, 128):
            cells = x[start : min(args.cells, start + 128)]
            module.encode(expressed_crop(cells, module.crop_size), cells.sum(1, keepdim=True))

    @torch.no_grad()
    def decoding() -> None:
        module.decode(tokens["z_tokens"], tokens["z"], torch.arange(x.shape[1]))

    results = {"training step": interleaved(training_step, TRAINING_TRICKS, args.rounds)}
    results["embedding"] = interleaved(embedding, EMBEDDING_TRICKS, args.rounds)
    with torch.no_grad():
        tokens = module.eval().inference(x[: args.decode_cells])
    results["decoding every gene"] = interleaved(decoding, DECODING_TRICKS, args.rounds)
    report = {
        "preset": args.preset,
        "threads": args.threads,
        "batch": args.batch,
        "cells": args.cells,
        "decode_cells": args.decode_cells,
        "rounds": args.rounds,
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "seconds": results,
    }
    for work, medians in results.items():
        reference = medians["all tricks on"]
        print(f"{work}: {reference:.3f} s with every trick")
        for name, value in medians.items():
            if name != "all tricks on":
                print(f"  {name}: {value:.3f} s ({value / reference:.2f}x the time)")
    print(f"({args.threads} threads, load {load_before:.1f} -> {report['load_average_1min'][1]:.1f})")
    path = args.json or OUTPUT / f"speed_tricks_{args.preset}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
