"""Scratch: evaluation decoding at several chunk sizes, time and peak memory, both presets, alternated.

Paper preset: 4 cells x the 4,096 most expressed of 27,952 synthetic genes (as ``vs_reference.py`` reconstructs);
small preset: 128 cells x 2,511 genes (Kang 2018's vocabulary). Each variant sets the gene queries per chunk
(through ``DECODE_FLOAT_BUDGET``, which counts floats of query width) and decodes the same tokens; its logits are
checked against the first variant's.
Run from the repository root: ``OMP_NUM_THREADS=2 python benchmarks/results/speed/decode_budget/decode_budget_scan.py``.
"""

import json
import statistics
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
from _speed import paired_models, peak_memory_mb, synthetic_counts

import sctrilemma.module._decoder as decoder_module

torch.set_num_threads(2)
CASES = {"paper": (4, 27952, 4096, [8192, 2048, 1024, 512]), "small": (128, 2511, 2511, [8192, 4096, 2048])}
ROUNDS = 5
results = []
for preset, (n_cells, n_genes, n_decoded, budgets) in CASES.items():
    module, _ = paired_models(preset, n_genes)
    x = synthetic_counts(n_cells, n_genes, min(2000, n_genes // 2))
    genes = torch.arange(n_decoded)
    with torch.inference_mode():
        inference = module.inference(x)
    tokens, pooled = inference["z_tokens"], inference["z"]

    def decode(module=module, tokens=tokens, pooled=pooled, genes=genes) -> torch.Tensor:
        with torch.inference_mode():
            return module.decode(tokens, pooled, genes)

    reference = None
    times = {budget: [] for budget in budgets}
    memory = {}
    for round_ in range(ROUNDS + 1):
        for budget in budgets:
            decoder_module.DECODE_FLOAT_BUDGET = budget * module.n_hidden
            if round_ == 0:  # warm-up, output check and peak memory
                logits = decode()
                reference = logits if reference is None else reference
                assert torch.allclose(logits, reference, atol=1e-4), budget
                memory[budget] = peak_memory_mb(decode)
                continue
            start = time.perf_counter()
            decode()
            times[budget].append(time.perf_counter() - start)
    for budget in budgets:
        row = {
            "preset": preset,
            "budget": budget,
            "median_s": statistics.median(times[budget]),
            "times_s": times[budget],
            "peak_mb": memory[budget],
        }
        results.append(row)
        print(json.dumps(row), flush=True)
print(json.dumps(results))
