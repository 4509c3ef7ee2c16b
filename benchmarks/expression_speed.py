"""Normalised expression and differential expression: SCTrilemma against scVI, side by side.

Each model trains briefly on Kang 2018 (8,684 cells, 2,511 genes; the timings do not depend on how well it is
trained), then ``get_normalized_expression(library_size=1e4)`` of every cell and
``differential_expression(groupby="cell_type")`` (one group against the rest, scvi-tools' defaults) are timed. Every
run is a fresh process with torch's thread count pinned; rounds alternate the variants so that a change of load hits
all of them. ``--baseline-src`` adds the same SCTrilemma measurement with another checkout's ``src`` (e.g. a
``git worktree`` of an earlier commit) for a before/after comparison; ``--bf16`` adds SCTrilemma with
``model.precision = "bf16"`` (bf16 autocast on the CPU), with the cosine of each cell's normalised expression and
embedding to fp32.

The decoding rate is given in GFLOP/s (the decoder's multiply-adds for every gene of every cell) and as a share of
the fp32 GEMM rate that ``benchmarks/roofline.py`` measured at the same thread count.

Usage: ``python benchmarks/expression_speed.py [--threads 2] [--rounds 2] [--baseline-src DIR] [--bf16] [--json PATH]``.
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
from _speed import OUTPUT, SHARED_DATA  # noqa: E402

DATA = SHARED_DATA / "kang2018_pbmc_ctrl.h5ad"
TRAINING_STEPS = 60


def decoding_flops_per_cell(module) -> float:
    """FLOPs of decoding every gene of one cell, per gene and block: folded attention over the ``K`` tokens and the
    SwiGLU layer; the last block's output projection and the count head fold into one ``(2, n_ffn)`` map.
    """
    width, tokens = module.n_hidden, module.n_latent_tokens
    heads = module.decoder.blocks[0].attention.n_heads
    ffn = module.decoder.blocks[0].ffn.proj_out.in_features
    attention_and_hidden = 4 * heads * tokens * width + 2 * width * 2 * ffn
    per_gene = len(module.decoder.blocks) * attention_and_hidden + (len(module.decoder.blocks) - 1) * 2 * ffn * width
    per_gene += 2 * ffn * 2 + 2 * width * 2  # the folded read-out of the hidden layer and of the residual stream
    return module.n_input * per_gene


def min_row_cosine(a, b) -> float:
    """The smallest cosine similarity between corresponding rows of two arrays (torch's, in float64)."""
    import torch

    rows = [torch.as_tensor(x, dtype=torch.float64) for x in (a, b)]
    return float(torch.nn.functional.cosine_similarity(*rows, dim=1).min())


def child(method: str, threads: int) -> dict:
    """Train briefly, then time both calls; one process per measurement."""
    import warnings

    import anndata as ad
    import scvi
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    adata = ad.read_h5ad(DATA)
    scvi.settings.seed = 0
    if method == "scvi":
        scvi.model.SCVI.setup_anndata(adata)
        model = scvi.model.SCVI(adata, gene_likelihood="zinb")
        model.train(max_epochs=2, enable_progress_bar=False)
        flops = None
    else:
        import sctrilemma

        sctrilemma.SCTrilemma.setup_anndata(adata)
        model = sctrilemma.SCTrilemma(adata, preset="small")
        model.train(max_steps=TRAINING_STEPS, early_stopping=False, enable_progress_bar=False)
        flops = decoding_flops_per_cell(model.module)
    torch.set_num_threads(threads)  # training may have tuned it
    cosines = {}
    if method == "sctrilemma_bf16":  # fp32 outputs first, untimed, to compare with
        fp32 = model.get_normalized_expression(library_size=1e4, return_numpy=True), model.get_latent_representation()
        model.precision = "bf16"
    start = time.perf_counter()
    expression = model.get_normalized_expression(library_size=1e4, return_numpy=True)
    expression_s = time.perf_counter() - start
    if method == "sctrilemma_bf16":
        cosines = {
            "min_cosine_expression": min_row_cosine(expression, fp32[0]),
            "min_cosine_embedding": min_row_cosine(model.get_latent_representation(), fp32[1]),
        }
    start = time.perf_counter()
    model.differential_expression(groupby="cell_type", silent=True)
    de_s = time.perf_counter() - start
    row = {"method": method, "threads": threads, "expression_s": expression_s, "de_s": de_s, **cosines}
    if flops is not None:
        row["decode_gflop_per_cell"] = flops / 1e9
        row["n_cells"] = adata.n_obs
    return row


def run_child(method: str, threads: int, src: str | None) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    command = [sys.executable, __file__, "--child", method, "--threads", str(threads)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    row["load_after"] = os.getloadavg()[0]
    return row


def summary(rows: list[dict], gemm_gflops: float | None) -> str:
    by_variant: dict[str, list[dict]] = {}
    for row in rows:
        by_variant.setdefault(row["variant"], []).append(row)
    scvi = by_variant.get("scvi", [])
    lines = [
        "| variant | expression s | DE s | expression / scVI | DE / scVI | decoding GFLOP/s | share of GEMM rate |"
    ]
    lines.append("|---|---|---|---|---|---|---|")

    def stat(values: list[float]) -> str:
        return f"{statistics.mean(values):.2f}" + (f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else "")

    for variant, runs in by_variant.items():
        expression = [r["expression_s"] for r in runs]
        de = [r["de_s"] for r in runs]
        ratio_e = ratio_d = gflops = share = "–"
        if scvi and variant != "scvi":
            ratio_e = f"{statistics.mean(expression) / statistics.mean(r['expression_s'] for r in scvi):.1f}x"
            ratio_d = f"{statistics.mean(de) / statistics.mean(r['de_s'] for r in scvi):.1f}x"
        if "decode_gflop_per_cell" in runs[0]:
            rate = statistics.mean(r["decode_gflop_per_cell"] * r["n_cells"] / r["expression_s"] for r in runs)
            gflops = f"{rate:.0f}"
            share = "–" if gemm_gflops is None else f"{rate / gemm_gflops:.2f}"
        lines.append(f"| {variant} | {stat(expression)} | {stat(de)} | {ratio_e} | {ratio_d} | {gflops} | {share} |")
    for variant, runs in by_variant.items():
        if "min_cosine_expression" in runs[0]:
            expression = min(r["min_cosine_expression"] for r in runs)
            embedding = min(r["min_cosine_embedding"] for r in runs)
            lines.append(
                f"\n{variant}: smallest cosine to fp32, expression {expression:.5f}, embedding {embedding:.5f}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline-src", default=None, help="another checkout's src directory, measured beside")
    parser.add_argument("--bf16", action="store_true", help="also SCTrilemma with precision='bf16'")
    parser.add_argument("--json", type=Path, default=OUTPUT / "expression_speed.json")
    parser.add_argument("--report", type=Path, default=None, help="print the table of a saved --json file")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.threads)))
        return
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(summary(saved["rows"], saved["gemm_gflops_fp32"]))
        return
    variants = [("sctrilemma", None), ("scvi", None)]
    if args.baseline_src is not None:
        variants.insert(1, ("sctrilemma_baseline", args.baseline_src))
    if args.bf16:
        variants.insert(1, ("sctrilemma_bf16", None))
    rows = []
    for round_ in range(args.rounds):
        for variant, src in variants:
            method = variant if variant in ("scvi", "sctrilemma_bf16") else "sctrilemma"
            row = {"variant": variant, "round": round_, **run_child(method, args.threads, src)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    roofline = OUTPUT / "roofline.json"
    gemm = None
    if roofline.exists():
        gemm = json.loads(roofline.read_text()).get("gemm_gflops_fp32")
    print(summary(rows, gemm))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows, "gemm_gflops_fp32": gemm}, indent=1))


if __name__ == "__main__":
    main()
