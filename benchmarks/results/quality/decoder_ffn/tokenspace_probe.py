"""Scratch: a decoder without a feed-forward layer, decoded in the K-token space (never forming (cell, gene, d)).

logits = R (e ⊙ m) + softmax((E (m ⊙ A)) / rms + b) (V Rᵀ) + R (out_bias + β) + r, with rms² = (E² m²)/d + eps.
Checks equality with the module's evaluation path and times both on Kang (trained briefly), 2 threads. Run from the
repository root with ``decoder_ffn_env.patch`` applied.
"""

import json
import os
import time
import warnings

os.environ["SCTRI_DEC_FFN"] = "0"  # read when the module is built

import anndata as ad
import numpy as np
import torch

from sctrilemma import SCTrilemma
from sctrilemma._constants import SCT_MODULE_KEYS as KEYS

warnings.filterwarnings("ignore")


def decode_tokens(decoder, z_tokens, pooled, gene_embedding, cells_per_chunk=16):
    """Logits ``(cells, genes, 2)`` of every gene, by chunks of cells, in the space of the K tokens."""
    block = decoder.blocks[0]
    attention = block.attention
    n_genes = gene_embedding.num_embeddings
    genes = decoder.gene_queries(torch.arange(n_genes), gene_embedding).float()  # (G, d)
    genes_squared = genes.square()
    width = genes.shape[1]
    eps = block.norm_queries.eps or torch.finfo(torch.float32).eps
    modulation = decoder.query_router.modulation(pooled)[:, 0, :]  # (B, d)
    keys, key_bias, values = attention.fold_context(block.norm_context(z_tokens), block.norm_queries.weight)
    head, head_bias = decoder.count_head.weight, decoder.count_head.bias  # (2, d), (2,)
    constant = head @ (attention.to_out.bias + block.ffn.proj_out.bias) + head_bias
    values_read = values @ head.t()  # (B, K, 2)
    n_cells, n_tokens = z_tokens.shape[0], keys.shape[-1]
    out = torch.empty(n_cells, n_genes, 2)
    for start in range(0, n_cells, cells_per_chunk):
        chunk = slice(start, start + cells_per_chunk)
        n = min(n_cells, start + cells_per_chunk) - start
        m = modulation[chunk]
        maps = torch.cat([m[:, :, None] * keys[chunk], m[:, :, None] * head.t()[None]], dim=2)  # (n, d, K + 2)
        products = (genes @ maps.permute(1, 0, 2).reshape(width, n * (n_tokens + 2))).view(n_genes, n, n_tokens + 2)
        inverse_rms = torch.rsqrt(genes_squared @ m.square().t() / width + eps)  # (G, n)
        scores = products[..., :n_tokens] * inverse_rms[..., None] + key_bias[chunk, 0][None]
        weights = torch.softmax(scores, dim=-1)
        logits = products[..., n_tokens:] + torch.einsum("gnk,nko->gno", weights, values_read[chunk]) + constant
        out[chunk] = logits.transpose(0, 1)
    return out


torch.set_num_threads(2)
adata = ad.read_h5ad("../shared/data/kang2018_pbmc_ctrl.h5ad")
adata.obs_names_make_unique()
SCTrilemma.setup_anndata(adata, donor_key="donor")
model = SCTrilemma(adata, preset="small")
model.train(max_steps=30, enable_progress_bar=False)
torch.set_num_threads(2)
module = model.module.eval()
tensors = next(iter(model._make_data_loader(adata=adata, indices=np.arange(1024), batch_size=1024)))
with torch.no_grad():
    inferred = module.inference(**module._get_inference_input(tensors))
z, pooled = inferred[KEYS.Z_TOKENS_KEY], inferred["z"]
decoder, table = module.decoder, module.gene_embedding
all_genes = torch.arange(adata.n_vars)
with torch.no_grad():
    reference = decoder(z, pooled, all_genes, table)
    tokens = decode_tokens(decoder, z, pooled, table)
    print("max abs diff", float((reference - tokens).abs().max()), "ref scale", float(reference.abs().max()))
    seconds = {}
    ways = {
        "fast_module": lambda: decoder(z, pooled, all_genes, table),
        "tokens": lambda: decode_tokens(decoder, z, pooled, table),
    }
    for name, decode in ways.items():
        decode()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            decode()
            times.append(time.perf_counter() - start)
        seconds[name] = round(min(times), 3)
    print(json.dumps({"cells": 1024, "genes": adata.n_vars, **seconds}))
