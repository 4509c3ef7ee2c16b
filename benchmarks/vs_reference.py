"""Our module against the plain upstream-style reference, side by side, with the same weights.

The reference (``sctrilemma.benchmark._reference.UpstreamStyleVAE``) uses ``nn.MultiheadAttention``, the
two-linear E-Gate per token, every cell padded to the crop size, fp32. For each data set (synthetic cells
with 2,000 expressed genes, and the real expressed-gene distributions of ``shared/data``) it reports the
speed ratio of embedding, reconstruction and a training step, and the ratio of peak memory; outputs must
agree (embeddings to 1e-4 in fp32; the fast path's per-cell cosine to the fp32 embedding is reported).

    python benchmarks/vs_reference.py --json benchmarks/output/vs_reference.json
    python benchmarks/vs_reference.py --quick
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn.functional as F
from _speed import (
    N_SYNTHETIC_GENES,
    OUTPUT,
    paired_median_seconds,
    paired_models,
    peak_memory_mb,
    print_table,
    real_counts,
    synthetic_counts,
    write_json,
)
from scvi import REGISTRY_KEYS
from scvi.distributions import ZeroInflatedNegativeBinomial

from sctrilemma.module._inputs import training_crop

LOGVAR_MIN, LOGVAR_MAX = -4.0, 2.0


def cpu_supports_bf16() -> bool:
    """Whether this CPU has native bf16 matrix instructions (AMX or AVX-512 BF16)."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


# ---------------------------------------------------------------- the reference's steps, written plainly
def reference_train_loss(ref, x: torch.Tensor, genes: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The reference's training loss on a given training crop: per-token E-Gate, MHA, ZINB + KL to N(0, I)."""
    library = x.sum(1, keepdim=True)
    expression = torch.log1p(1e4 * counts / library)
    tokens = ref.gene_embedding(genes) * torch.sigmoid(ref.expr_mod(ref.raw_proj(expression.unsqueeze(-1))))
    latents = ref.latent_queries.expand(x.shape[0], -1, -1)
    for block in ref.encoder_blocks:
        latents = block(latents, tokens)
    latents = ref.encoder_output_bn(latents)
    mu, logvar = ref.mu_proj(latents), ref.logvar_proj(latents).clamp(LOGVAR_MIN, LOGVAR_MAX)
    z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
    gate = torch.sigmoid(ref.z_query_gate(z.mean(1))).unsqueeze(1)
    queries = ref.gene_embedding(genes) * gate
    for block in ref.decoder_blocks:
        queries = block(queries, z)
    mean_logit, zi_logit = ref.output_proj(queries).unbind(-1)
    proportions = torch.softmax(mean_logit, -1)
    px = ZeroInflatedNegativeBinomial(
        mu=proportions * counts.sum(-1, keepdim=True), theta=F.softplus(ref.px_r)[genes], zi_logits=zi_logit
    )
    kl = 0.5 * (mu.square() + logvar.exp() - 1.0 - logvar).sum((-2, -1))
    return torch.mean(-px.log_prob(counts).sum(-1) + kl)


def module_train_loss(module, x: torch.Tensor, genes: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Our training loss on the same crop, through the module's own inference/generative/loss."""
    from sctrilemma.module._inputs import GeneCrop

    tensors = {REGISTRY_KEYS.X_KEY: x}
    inference = module.inference(x, crop=GeneCrop(genes, counts, None))
    generative = module.generative(**module._get_generative_input(tensors, inference))
    return module.loss(tensors, inference, generative).loss


def train_step(loss_fn, net, optimizer, x, crop, bf16: bool) -> None:
    """One optimiser step (bf16 autocast as in Lightning's ``bf16-mixed`` when asked)."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = loss_fn(net, x, crop.genes, crop.counts)
    loss.backward()
    optimizer.step()


def without_dropout(net):
    """A copy of ``net`` with every dropout at zero (for the deterministic equality check)."""
    net = copy.deepcopy(net)
    for mod in net.modules():
        if hasattr(mod, "dropout_rate"):
            mod.dropout_rate = 0.0
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        if isinstance(mod, torch.nn.MultiheadAttention):
            mod.dropout = 0.0
    return net


# ---------------------------------------------------------------- one data set
def compare(name: str, x: torch.Tensor, preset: str, args, fast_available: bool) -> dict:
    """All measurements on the counts ``x``; returns one result row."""
    module, ref = paired_models(preset, x.shape[1])
    crop_ref = min(module.crop_size, x.shape[1])
    batches = x.split(args.batch_size)

    def embed_ours(precision: str, cells=batches) -> torch.Tensor:
        module.precision = precision
        with torch.inference_mode():
            return torch.cat([module.inference(b)["qz"].loc for b in cells])

    def embed_ref(cells=batches) -> torch.Tensor:
        with torch.inference_mode():
            return torch.cat([ref.embed(b, crop_ref) for b in cells])

    totals = x.sum(0)
    recon_genes = torch.sort(torch.argsort(-totals, stable=True)[:crop_ref]).values
    recon_cells = x[: args.recon_cells].split(args.batch_size)

    def reconstruct_ours(precision: str) -> torch.Tensor:
        module.precision = precision
        out = []
        with torch.inference_mode():
            for b in recon_cells:
                inference = module.inference(b)
                out.append(module.decode(inference["z_tokens"], inference["z"], recon_genes)[..., 0])
        return torch.cat(out)

    def reconstruct_ref() -> torch.Tensor:
        out = []
        with torch.inference_mode():
            for b in recon_cells:
                mu, _ = ref.encode(b, crop_ref)
                out.append(ref.decode_logits(mu, mu.mean(1), recon_genes)[..., 0])
        return torch.cat(out)

    # Outputs first: fp32 must equal the reference, bf16 is compared cell by cell.
    emb_ref, emb_fp32 = embed_ref(), embed_ours("fp32")
    row = {"dataset": name, "n_cells": x.shape[0], "mean_expressed": float((x > 0).sum(1).float().mean())}
    row["max_abs_diff"] = float((emb_fp32 - emb_ref).abs().max())
    rec_ref, rec_fp32 = reconstruct_ref(), reconstruct_ours("fp32")
    row["reconstruct_max_abs_diff"] = float((rec_fp32 - rec_ref).abs().max())
    fast = "bf16" if fast_available else "fp32"
    emb_fast = embed_ours(fast)
    row["min_cosine_fast"] = float(F.cosine_similarity(emb_fast, emb_fp32, dim=1).min())
    centred = emb_fp32.mean(0)
    row["min_cosine_fast_centred"] = float(F.cosine_similarity(emb_fast - centred, emb_fp32 - centred, dim=1).min())
    rec_fast = reconstruct_ours(fast)
    row["min_cosine_reconstruct_fast"] = float(
        F.cosine_similarity(torch.softmax(rec_fast, -1), torch.softmax(rec_fp32, -1), dim=1).min()
    )

    # Speed, side by side: every round runs the reference and both of our paths in turn.
    r = args.repeats
    t = paired_median_seconds(
        {"ref": embed_ref, "fp32": lambda: embed_ours("fp32"), "fast": lambda: embed_ours(fast)}, r
    )
    row.update(embed_ref_cells_per_s=x.shape[0] / t["ref"], embed_cells_per_s_fp32=x.shape[0] / t["fp32"])
    row.update(embed_speedup_fp32=t["ref"] / t["fp32"], embed_speedup_fast=t["ref"] / t["fast"])
    t = paired_median_seconds(
        {"ref": reconstruct_ref, "fp32": lambda: reconstruct_ours("fp32"), "fast": lambda: reconstruct_ours(fast)}, r
    )
    row.update(reconstruct_speedup_fp32=t["ref"] / t["fp32"], reconstruct_speedup=t["ref"] / t["fast"])

    # Training step on one training crop, same crop for both; equality checked without dropout.
    x_train = x[: args.train_cells]
    crop = training_crop(x_train, module.crop_size, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    loss_ref = reference_train_loss(without_dropout(ref).train(), x_train, crop.genes, crop.counts)
    torch.manual_seed(1)
    loss_ours = module_train_loss(without_dropout(module).train(), x_train, crop.genes, crop.counts)
    row["train_loss_rel_diff"] = float(((loss_ours - loss_ref) / loss_ref).abs().detach())
    ref_train, module_train = copy.deepcopy(ref).train(), copy.deepcopy(module).train()
    opt_ref = torch.optim.Adam(ref_train.parameters(), lr=1e-4)
    opt_ours = torch.optim.Adam(module_train.parameters(), lr=1e-4)
    t = paired_median_seconds(
        {
            "ref": lambda: train_step(reference_train_loss, ref_train, opt_ref, x_train, crop, False),
            "fp32": lambda: train_step(module_train_loss, module_train, opt_ours, x_train, crop, False),
            "fast": lambda: train_step(module_train_loss, module_train, opt_ours, x_train, crop, fast == "bf16"),
        },
        r,
    )
    row.update(train_step_speedup_fp32=t["ref"] / t["fp32"], train_step_speedup=t["ref"] / t["fast"])

    # Peak memory of one batch of each task, each in a fresh child process.
    first = batches[:1]
    mem = {
        "embed_ref": peak_memory_mb(lambda: embed_ref(first)),
        "embed_ours": peak_memory_mb(lambda: embed_ours("fp32", first)),
        "reconstruct_ref": peak_memory_mb(reconstruct_ref),
        "reconstruct_ours": peak_memory_mb(lambda: reconstruct_ours("fp32")),
    }
    row.update({f"peak_mb_{k}": v for k, v in mem.items()})
    row["peak_memory_ratio"] = mem["embed_ours"] / mem["embed_ref"]
    row["peak_memory_ratio_reconstruct"] = mem["reconstruct_ours"] / mem["reconstruct_ref"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small preset and few cells (about two minutes)")
    parser.add_argument("--json", default=str(OUTPUT / "vs_reference.json"), help="write the results to this JSON file")
    parser.add_argument("--preset", default=None, help="model preset (default: paper; small with --quick)")
    parser.add_argument("--datasets", default="synthetic,cellbench,kang")
    args = parser.parse_args()
    preset = args.preset or ("small" if args.quick else "paper")
    paper = preset == "paper"
    args.n_cells = 32 if args.quick else (64 if paper else 512)
    args.batch_size = 16 if paper else 128
    args.recon_cells = 4 if paper else 64
    args.train_cells = 2 if paper else 32
    args.repeats = 1 if args.quick else 2
    fast_available = cpu_supports_bf16()
    print(f"preset {preset}, torch threads {torch.get_num_threads()}, CPU bf16: {fast_available}")

    rows = []
    for name in args.datasets.split(","):
        if name == "synthetic":
            x = synthetic_counts(args.n_cells, N_SYNTHETIC_GENES, 2000)
        else:
            x = real_counts(name, args.n_cells)
        rows.append(compare(name, x, preset, args, fast_available))
        print_table(rows[-1:], list(rows[-1]))
    columns = ["dataset", "mean_expressed", "max_abs_diff", "embed_speedup_fp32", "embed_speedup_fast",
               "min_cosine_fast", "reconstruct_speedup_fp32", "reconstruct_speedup", "train_step_speedup_fp32",
               "train_step_speedup", "peak_memory_ratio", "peak_memory_ratio_reconstruct"]  # fmt: skip
    print_table(rows, columns)
    summary = {key: rows[0][key] for key in columns[2:]}
    write_json(args.json, {"preset": preset, "threads": torch.get_num_threads(), **summary, "rows": rows})


if __name__ == "__main__":
    main()
