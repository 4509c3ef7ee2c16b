"""Scratch: a decoder without a feed-forward layer, decoded in the K-token space (never forming (cell, gene, d)).

logits = R (e ⊙ m) + softmax((E (m ⊙ A)) / rms + b) (V Rᵀ) + R (out_bias + β) + r, with rms² = (E² m²)/d + eps.
Checks equality with the module's _decode_fast and times both on Kang (trained briefly), 2 threads.
"""
import os, time, json, warnings
warnings.filterwarnings("ignore")
os.environ["SCTRI_DEC_FFN"] = "0"
import torch, anndata as ad, numpy as np
import torch.nn.functional as F
from sctrilemma import SCTrilemma

def decode_tokens(decoder, z_tokens, pooled, gene_embedding, cells_per_chunk=16):
    block = decoder.blocks[0]
    att = block.attention
    G = gene_embedding.num_embeddings
    E = decoder.gene_queries(torch.arange(G), gene_embedding).float()          # (G, d)
    E2 = E.square()
    d = E.shape[1]
    eps = block.norm_queries.eps or torch.finfo(torch.float32).eps
    m = decoder.query_router.modulation(pooled)[:, 0, :]                       # (B, d)
    A, b, V = att.fold_context(block.norm_context(z_tokens), block.norm_queries.weight)  # (B,d,K) (B,1,K) (B,K,d)
    R, r = decoder.count_head.weight, decoder.count_head.bias                  # (2,d), (2,)
    const = R @ (att.to_out.bias + block.ffn.proj_out.bias) + r                # (2,)
    VR = V @ R.t()                                                             # (B, K, 2)
    B, K = z_tokens.shape[0], A.shape[-1]
    out = torch.empty(B, G, 2)
    for s in range(0, B, cells_per_chunk):
        c = slice(s, s + cells_per_chunk); n = min(B, s + cells_per_chunk) - s
        mc = m[c]
        W = torch.cat([mc[:, :, None] * A[c], mc[:, :, None] * R.t()[None]], dim=2)   # (n, d, K+2)
        W = W.permute(1, 0, 2).reshape(d, n * (K + 2))
        P = (E @ W).view(G, n, K + 2)                                           # (G, n, K+2)
        inv = torch.rsqrt(E2 @ mc.square().t() / d + eps)                       # (G, n)
        scores = P[..., :K] * inv[..., None] + b[c, 0][None]                    # (G, n, K)
        p = torch.softmax(scores, dim=-1)
        logits = P[..., K:] + torch.einsum("gnk,nko->gno", p, VR[c]) + const
        out[c] = logits.transpose(0, 1)
    return out

torch.set_num_threads(2)
a = ad.read_h5ad("../shared/data/kang2018_pbmc_ctrl.h5ad"); a.obs_names_make_unique()
SCTrilemma.setup_anndata(a, donor_key="donor")
mdl = SCTrilemma(a, preset="small"); mdl.train(max_steps=30, enable_progress_bar=False)
torch.set_num_threads(2)
mod = mdl.module.eval()
dl = mdl._make_data_loader(adata=a, indices=np.arange(1024), batch_size=1024)
tensors = next(iter(dl))
from sctrilemma.module._module import KEYS
with torch.no_grad():
    out = mod.inference(**mod._get_inference_input(tensors))
z, pooled = out[KEYS.Z_TOKENS_KEY], out["z"]
dec, ge = mod.decoder, mod.gene_embedding
genes = torch.arange(a.n_vars)
with torch.no_grad():
    ref = dec(z, pooled, genes, ge)
    new = decode_tokens(dec, z, pooled, ge)
    print("max abs diff", float((ref - new).abs().max()), "ref scale", float(ref.abs().max()))
    res = {}
    for name, fn in [("fast_module", lambda: dec(z, pooled, genes, ge)), ("tokens", lambda: decode_tokens(dec, z, pooled, ge))]:
        fn(); ts = []
        for _ in range(3):
            t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
        res[name] = round(min(ts), 3)
    print(json.dumps({"cells": 1024, "genes": a.n_vars, **res}))
