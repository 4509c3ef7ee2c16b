"""Import of the authors' released Lightning checkpoint and gene vocabulary, without unpickling code.

The checkpoint (``final.ckpt``) is a ``torch.save`` zip archive whose pickle also holds an omegaconf
``DictConfig``, RNG states with numpy arrays, and other Python objects. :func:`read_checkpoint_tensors`
rebuilds only the tensors of its ``"state_dict"``: every other global the pickle names is replaced by an
inert placeholder, so no callable from the file is ever looked up or run. :func:`upstream_to_module_state`
then renames the tensors to :class:`~sctrilemma.module.SCTrilemmaModule`'s state-dict keys and infers
the module configuration from their shapes.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sctrilemma.io._torch_zip import read_checkpoint_tensors

if TYPE_CHECKING:
    from os import PathLike

__all__ = ["read_checkpoint_tensors", "read_upstream_vocabulary", "upstream_to_module_state"]


def read_upstream_vocabulary(path: str | PathLike[str]) -> list[str]:
    """Read the authors' gene vocabulary, a JSON object ``{token: index}``.

    Parameters
    ----------
    path
        JSON file mapping Ensembl IDs (and the special tokens ``"<pad>"``, ``"<mask>"``) to indices.

    Returns
    -------
    Token names ordered by index, so that position ``i`` names row ``i`` of the gene embedding.

    Raises
    ------
    ValueError
        If the file is not a JSON object of integer indices forming a permutation of ``0..V-1``.
    """
    path = Path(path)
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a JSON vocabulary ({err})") from err
    if not isinstance(vocab, dict) or not vocab:
        raise ValueError(f"{path}: the vocabulary must be a non-empty JSON object mapping token -> index")
    not_int = [name for name, index in vocab.items() if type(index) is not int]
    if not_int:
        raise ValueError(f"{path}: non-integer indices for tokens {not_int[:5]}")
    names: list[str | None] = [None] * len(vocab)
    out_of_range, duplicated = [], []
    for name, index in vocab.items():
        if not 0 <= index < len(vocab):
            out_of_range.append(index)
        elif names[index] is not None:
            duplicated.append(index)
        else:
            names[index] = name
    if out_of_range or duplicated:
        raise ValueError(
            f"{path}: indices must be a permutation of 0..{len(vocab) - 1}; "
            f"out of range: {sorted(out_of_range)[:5]}, duplicated: {sorted(duplicated)[:5]}"
        )
    return names  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------- key mapping
_BLOCK_PARTS = {"encoder_blocks": "encoder.blocks", "decoder_blocks": "decoder.blocks"}
_BLOCK_RENAMES = {
    "norm_q.weight": "norm_queries.weight",
    "norm_kv.weight": "norm_context.weight",
    "norm_ff.weight": "norm_ffn.weight",
    "attn.out_proj.weight": "attention.to_out.weight",
    "attn.out_proj.bias": "attention.to_out.bias",
    "ff.out_proj.weight": "ffn.proj_out.weight",
    "ff.out_proj.bias": "ffn.proj_out.bias",
}
_BLOCK_FUSED = ("attn.in_proj_weight", "attn.in_proj_bias", "ff.gate_proj.weight", "ff.gate_proj.bias",
                "ff.value_proj.weight", "ff.value_proj.bias")  # fmt: skip
_TOP_RENAMES = {
    "gene_embedding.gene_id_embedding.weight": "encoder.gene_embedding.weight",
    "raw_proj.weight": "encoder.expression_gate.expr_proj.weight",
    "raw_proj.bias": "encoder.expression_gate.expr_proj.bias",
    "expr_mod.weight": "encoder.expression_gate.gate.weight",
    "expr_mod.bias": "encoder.expression_gate.gate.bias",
    **{f"encoder_output_bn.norm.{b}": f"encoder.posterior_norm.{b}"
       for b in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")},
    "mu_proj.weight": "encoder.to_mean.weight",
    "mu_proj.bias": "encoder.to_mean.bias",
    "logvar_proj.weight": "encoder.to_logvar.weight",
    "logvar_proj.bias": "encoder.to_logvar.bias",
    "z_query_gate.0.weight": "decoder.query_router.mlp.0.weight",
    "z_query_gate.0.bias": "decoder.query_router.mlp.0.bias",
    "z_query_gate.2.weight": "decoder.query_router.mlp.2.weight",
    "z_query_gate.2.bias": "decoder.query_router.mlp.2.bias",
    "output_proj.weight": "decoder.count_head.weight",
    "output_proj.bias": "decoder.count_head.bias",
    "px_r": "decoder.px_r",
    "tissue_prior_mu.weight": "prior.to_mean.weight",
    "tissue_prior_mu.bias": "prior.to_mean.bias",
    "tissue_prior_logvar.weight": "prior.to_logvar.weight",
    "tissue_prior_logvar.bias": "prior.to_logvar.bias",
}  # fmt: skip
_REQUIRED = ("gene_embedding.gene_id_embedding.weight", "raw_proj.weight", "raw_proj.bias", "latent_queries",
             *(k for k in _TOP_RENAMES if k.startswith(("encoder_output_bn.", "mu_proj.", "logvar_proj.",
                                                        "output_proj."))),
             "px_r")  # fmt: skip
_OPTIONAL_GROUPS = {
    "gene_encoding": ("expr_mod.weight", "expr_mod.bias"),
    "decoder_query": ("z_query_gate.0.weight", "z_query_gate.0.bias", "z_query_gate.2.weight", "z_query_gate.2.bias"),
    "prior": ("tissue_prior_mu.weight", "tissue_prior_mu.bias", "tissue_prior_logvar.weight",
              "tissue_prior_logvar.bias"),
}  # fmt: skip
_BLOCK_KEY = re.compile(r"(encoder_blocks|decoder_blocks)\.(\d+)\.(.+)")


def _strip_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the LightningModule's ``model.`` prefix (and ``torch.compile``'s ``_orig_mod.``) if present."""
    if any(key.startswith("model.") for key in state):
        state = {(key[len("model.") :] if key.startswith("model.") else f"<no 'model.' prefix> {key}"): value
                 for key, value in state.items()}  # fmt: skip
    return {key.removeprefix("_orig_mod."): value for key, value in state.items()}


def upstream_to_module_state(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Rename the authors' checkpoint tensors to :class:`~sctrilemma.module.SCTrilemmaModule` keys.

    Fused projections are re-packed: ``nn.MultiheadAttention``'s ``in_proj`` (q; k; v stacked) becomes
    ``attention.to_q`` (first ``d`` rows) and ``attention.to_kv`` (last ``2d`` rows), and SwiGLU's
    separate ``gate_proj`` and ``value_proj`` become ``ffn.proj_in`` (gate half first).
    ``latent_queries`` ``(1, K, d)`` loses its leading axis. Tensors keep their dtype.

    Parameters
    ----------
    state
        The checkpoint's state dict, e.g. from :func:`read_checkpoint_tensors`; keys with or without
        the LightningModule's ``model.`` prefix.

    Returns
    -------
    module_state
        A state dict whose keys are exactly those of ``SCTrilemmaModule(**config).state_dict()``.
    config
        Keyword arguments of :class:`~sctrilemma.module.SCTrilemmaModule` inferred from the shapes:
        ``n_input`` (vocabulary size including ``<pad>`` and ``<mask>``), ``n_hidden``,
        ``n_latent_tokens``, ``n_encoder_layers``, ``n_decoder_layers``, ``ffn_multiplier``, ``prior``
        (``"pseudobulk"`` if ``tissue_prior_*`` are present, else ``"normal"``), ``n_prior_codes``
        (only with the pseudo-bulk prior), ``gene_encoding`` (``"gate"`` if ``expr_mod`` is present,
        else ``"additive"``), ``decoder_query`` and ``pooling`` (``"mean"``).

    Notes
    -----
    ``decoder_query`` is ``"gate"`` when ``z_query_gate`` is present and ``"none"`` otherwise: the
    ``"additive"`` ablation has the same parameters as ``"gate"`` and cannot be told apart from the keys.
    ``n_heads`` (it changes no shape), ``dropout_rate`` and ``crop_size`` cannot be inferred and are not
    in ``config``. :func:`read_checkpoint_tensors` deliberately does not read the pickled
    hyper-parameters, so pass them yourself; the paper's configuration is 8 heads, dropout 0.1 and a
    crop of 4,096 genes. A wrong ``n_heads`` loads without error but computes a different function.

    Raises
    ------
    ValueError
        If keys are missing or unknown (all of them are listed), or shapes are inconsistent.
    """
    src = _strip_prefix(dict(state))
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    missing: list[str] = []

    def take(key: str) -> torch.Tensor | None:
        if key not in src:
            missing.append(key)
            return None
        used.add(key)
        return src[key]

    for key in _REQUIRED:
        take(key)
    present = {group: [k in src for k in keys] for group, keys in _OPTIONAL_GROUPS.items()}
    for group, flags in present.items():
        if any(flags):  # a partly present group is reported as missing keys
            for key in _OPTIONAL_GROUPS[group]:
                take(key)
    for key in src:
        if key in _TOP_RENAMES and key in used:
            out[_TOP_RENAMES[key]] = src[key]

    # Transformer blocks.
    blocks: dict[str, set[int]] = {"encoder_blocks": set(), "decoder_blocks": set()}
    for key in src:
        match = _BLOCK_KEY.fullmatch(key)
        if match:
            blocks[match.group(1)].add(int(match.group(2)))
    n_ffn_seen: set[int] = set()
    for part, indices in blocks.items():
        if indices and indices != set(range(max(indices) + 1)):
            missing.extend(f"{part}.{i}.*" for i in range(max(indices) + 1) if i not in indices)
        for i in sorted(indices):
            prefix, target = f"{part}.{i}.", f"{_BLOCK_PARTS[part]}.{i}."
            for name, ours in _BLOCK_RENAMES.items():
                tensor = take(prefix + name)
                if tensor is not None:
                    out[target + ours] = tensor
            in_w, in_b, gate_w, gate_b, value_w, value_b = (take(prefix + name) for name in _BLOCK_FUSED)
            if in_w is not None and in_b is not None:
                d = in_w.shape[1]
                if in_w.shape != (3 * d, d) or in_b.shape != (3 * d,):
                    raise ValueError(f"{prefix}attn.in_proj has shape {tuple(in_w.shape)}, expected (3d, d)")
                out[target + "attention.to_q.weight"], out[target + "attention.to_q.bias"] = in_w[:d], in_b[:d]
                out[target + "attention.to_kv.weight"], out[target + "attention.to_kv.bias"] = in_w[d:], in_b[d:]
            if gate_w is not None and value_w is not None and gate_b is not None and value_b is not None:
                if gate_w.shape != value_w.shape or gate_b.shape != value_b.shape:
                    raise ValueError(f"{prefix}ff.gate_proj and ff.value_proj have different shapes")
                n_ffn_seen.add(gate_w.shape[0])
                out[target + "ffn.proj_in.weight"] = torch.cat([gate_w, value_w], dim=0)
                out[target + "ffn.proj_in.bias"] = torch.cat([gate_b, value_b], dim=0)

    unknown = sorted(set(src) - used)
    if missing or unknown:
        raise ValueError(
            "The checkpoint does not match the scTrilemma layout. "
            f"Missing keys: {sorted(set(missing))}. Unknown keys: {unknown}."
        )
    if not blocks["encoder_blocks"] or not blocks["decoder_blocks"]:
        raise ValueError("The checkpoint has no encoder or no decoder blocks.")

    # Configuration from shapes.
    n_input, n_hidden = src["gene_embedding.gene_id_embedding.weight"].shape
    queries = src["latent_queries"]
    if queries.dim() == 3 and queries.shape[0] == 1:
        queries = queries[0]
    if queries.dim() != 2 or queries.shape[1] != n_hidden:
        raise ValueError(f"latent_queries has shape {tuple(src['latent_queries'].shape)}, expected (1, K, {n_hidden})")
    out["encoder.latent_queries"] = queries
    if len(n_ffn_seen) != 1:
        raise ValueError(f"Blocks use different feed-forward widths {sorted(n_ffn_seen)}; expected one.")
    n_ffn = n_ffn_seen.pop()
    config: dict[str, Any] = {
        "n_input": int(n_input),
        "n_hidden": int(n_hidden),
        "n_latent_tokens": int(queries.shape[0]),
        "n_encoder_layers": len(blocks["encoder_blocks"]),
        "n_decoder_layers": len(blocks["decoder_blocks"]),
        "ffn_multiplier": _ffn_multiplier(n_ffn, int(n_hidden)),
        "prior": "pseudobulk" if any(present["prior"]) else "normal",
        "gene_encoding": "gate" if any(present["gene_encoding"]) else "additive",
        "decoder_query": "gate" if any(present["decoder_query"]) else "none",
        "pooling": "mean",
    }
    if config["prior"] == "pseudobulk":
        config["n_prior_codes"] = int(src["tissue_prior_mu.weight"].shape[1])
    if src["px_r"].shape != (n_input,):
        raise ValueError(f"px_r has shape {tuple(src['px_r'].shape)}, expected ({n_input},) like the gene embedding")
    out["embedding_depth"] = torch.zeros(())  # the paper's model reads every cell's counts as they are
    out["encoder_gene_mask"] = torch.ones(n_input, dtype=torch.bool)  # and every gene
    return out, config


def _ffn_multiplier(n_ffn: int, n_hidden: int) -> float:
    """A float ``m`` with ``int(m * n_hidden) == n_ffn`` (how the module sizes its SwiGLU)."""
    multiplier = n_ffn / n_hidden
    for _ in range(4):
        if int(multiplier * n_hidden) == n_ffn:
            return multiplier
        multiplier = math.nextafter(multiplier, math.inf)
    raise ValueError(f"Cannot express a feed-forward width of {n_ffn} for n_hidden={n_hidden} as a multiplier.")
