"""Import of the authors' released Lightning checkpoint and gene vocabulary, without unpickling code.

The checkpoint (``final.ckpt``) is a ``torch.save`` zip archive whose pickle also holds an omegaconf
``DictConfig``, RNG states with numpy arrays, and other Python objects. :func:`read_checkpoint_tensors`
rebuilds only the tensors of its ``"state_dict"``: every other global the pickle names is replaced by an
inert placeholder, so no callable from the file is ever looked up or run. :func:`upstream_to_module_state`
then renames the tensors to :class:`~sctrilemma.module.SCTrilemmaModule`'s state-dict keys and infers
the module configuration from their shapes.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import re
import struct
import sys
import zipfile
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from os import PathLike

_ZIP_MAGIC = b"PK\x03\x04"

_STORAGE_DTYPES: dict[str, torch.dtype] = {
    "DoubleStorage": torch.float64,
    "FloatStorage": torch.float32,
    "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16,
    "LongStorage": torch.int64,
    "IntStorage": torch.int32,
    "ShortStorage": torch.int16,
    "CharStorage": torch.int8,
    "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
    "ComplexFloatStorage": torch.complex64,
    "ComplexDoubleStorage": torch.complex128,
    "UntypedStorage": torch.uint8,
}


# ---------------------------------------------------------------------------------------------- unpickling
class _Inert:
    """Stand-in for every global the checkpoint names that is not needed to rebuild tensors.

    Constructing, calling, ``__setstate__`` and item/append assignment all accept anything and do nothing.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> _Inert:
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Inert:
        return _Inert()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        """Ignore ``value`` (pickle ``APPEND``)."""

    def extend(self, values: Any) -> None:
        """Ignore ``values`` (pickle ``APPENDS``)."""

    def __repr__(self) -> str:
        return "<inert placeholder>"


class _Sealed:
    """Refuses pickle ``BUILD``, so the file cannot alter an object after it was validated."""

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("the checkpoint tries to set the state of a tensor record")


@dataclass(frozen=True)
class _StorageType(_Sealed):
    """What ``torch.FloatStorage`` and friends unpickle to: just the element type."""

    dtype: torch.dtype


@dataclass(frozen=True)
class _LazyStorage(_Sealed):
    """A storage record of the archive, read only if a tensor of the state dict uses it."""

    key: str
    dtype: torch.dtype
    numel: int


@dataclass(frozen=True)
class _LazyTensor(_Sealed):
    """Arguments of ``torch._utils._rebuild_tensor_v2``, validated but not yet materialised."""

    storage: _LazyStorage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _is_int_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and all(type(v) is int and v >= 0 for v in value)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *args: Any) -> _LazyTensor | _Inert:
    """Safe stand-in for ``torch._utils._rebuild_tensor_v2``."""
    del args  # requires_grad, backward hooks, metadata
    if not isinstance(storage, _LazyStorage) or type(offset) is not int or offset < 0:
        return _Inert()
    if not (_is_int_tuple(size) and _is_int_tuple(stride) and len(size) == len(stride)):
        return _Inert()
    return _LazyTensor(storage, offset, size, stride)


def _rebuild_parameter(data: Any, *args: Any) -> Any:
    """Safe stand-in for ``torch._utils._rebuild_parameter(_with_state)``: the plain tensor."""
    return data if isinstance(data, _LazyTensor) else _Inert()


def _rebuild_from_type(func: Any, new_type: Any, args: Any, state: Any) -> Any:
    """Safe stand-in for ``torch._tensor._rebuild_from_type_v2``: the plain tensor."""
    del new_type, state
    if func in (_rebuild_tensor, _rebuild_parameter) and isinstance(args, tuple):
        return func(*args)
    return _Inert()


_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    **{("torch", name): _StorageType(dtype) for name, dtype in _STORAGE_DTYPES.items()},
    ("torch.storage", "UntypedStorage"): _StorageType(torch.uint8),
}


class _TensorOnlyUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the globals needed to rebuild tensors; all others become inert."""

    def find_class(self, module: str, name: str) -> Any:
        return _ALLOWED_GLOBALS.get((module, name), _Inert)

    def persistent_load(self, pid: Any) -> _LazyStorage:
        if not (isinstance(pid, tuple) and len(pid) == 5):
            raise pickle.UnpicklingError(f"unsupported persistent id {pid!r}")
        typename, storage_type, key, _location, numel = pid
        if isinstance(typename, bytes):
            typename = typename.decode("ascii")
        if typename != "storage" or not isinstance(storage_type, _StorageType):
            raise pickle.UnpicklingError(f"unsupported storage record {typename!r} of type {storage_type!r}")
        if not isinstance(key, str) or type(numel) is not int or numel < 0:
            raise pickle.UnpicklingError(f"malformed storage record {pid!r}")
        return _LazyStorage(key, storage_type.dtype, numel)


# ---------------------------------------------------------------------------------------------- archive
class _Archive:
    """The records of a ``torch.save`` zip archive, under its single top-level folder."""

    def __init__(self, zf: zipfile.ZipFile) -> None:
        self.zf = zf
        pickles = [name for name in zf.namelist() if name.endswith("/data.pkl") and name.count("/") == 1]
        if len(pickles) != 1:
            raise ValueError("corrupt torch checkpoint: expected exactly one '<prefix>/data.pkl' record")
        self.prefix = pickles[0][: -len("data.pkl")]
        names = set(zf.namelist())
        byteorder = zf.read(self.prefix + "byteorder").decode("ascii") if self.prefix + "byteorder" in names else None
        if byteorder not in (None, "little", "big"):
            raise ValueError(f"corrupt torch checkpoint: unknown byte order {byteorder!r}")
        self.swap = byteorder is not None and byteorder != sys.byteorder
        self._storages: dict[str, torch.Tensor] = {}

    def unpickle(self) -> Any:
        data = self.zf.read(self.prefix + "data.pkl")
        return _TensorOnlyUnpickler(io.BytesIO(data)).load()

    def storage(self, record: _LazyStorage) -> torch.Tensor:
        """The storage ``record`` as a flat tensor of its dtype (each record is read once)."""
        if record.key not in self._storages:
            if not re.fullmatch(r"[\w.\-]+", record.key):
                raise ValueError(f"corrupt torch checkpoint: invalid storage key {record.key!r}")
            try:
                raw = self.zf.read(f"{self.prefix}data/{record.key}")
            except KeyError:
                raise ValueError(f"corrupt torch checkpoint: storage record {record.key!r} is missing") from None
            self._storages[record.key] = (
                torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
            )
        flat = self._storages[record.key]
        itemsize = torch.empty((), dtype=record.dtype).element_size()
        if flat.numel() != record.numel * itemsize:
            raise ValueError(
                f"corrupt torch checkpoint: storage {record.key!r} has {flat.numel()} bytes, "
                f"expected {record.numel} x {itemsize}"
            )
        if self.swap and itemsize > 1:
            # Complex numbers swap their real and imaginary halves separately.
            unit = itemsize // 2 if record.dtype.is_complex else itemsize
            flat = flat.view(-1, unit).flip(-1).reshape(-1)
        return flat.view(record.dtype)

    def tensor(self, spec: _LazyTensor) -> torch.Tensor:
        storage = self.storage(spec.storage)
        extent = 1 + sum((s - 1) * st for s, st in zip(spec.size, spec.stride, strict=True)) if all(spec.size) else 0
        if spec.offset + extent > storage.numel():
            raise ValueError("corrupt torch checkpoint: a tensor reaches past the end of its storage")
        return torch.as_strided(storage, spec.size, spec.stride, spec.offset)


_READ_ERRORS = (
    pickle.UnpicklingError,
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    struct.error,
    UnicodeDecodeError,
    TypeError,
    AttributeError,
    IndexError,
    KeyError,
    RuntimeError,
    OverflowError,
    MemoryError,
    RecursionError,
    NotImplementedError,
)


def read_checkpoint_tensors(path: str | PathLike[str]) -> dict[str, torch.Tensor]:
    """Read the tensors of a ``torch.save`` checkpoint without executing code from it.

    The pickle is read by an unpickler that resolves only what rebuilding tensors needs
    (``torch._utils._rebuild_tensor_v2`` and ``_rebuild_parameter``, the storage types,
    ``collections.OrderedDict``), each mapped to a local, side-effect-free function. Every other global
    (builtins such as ``eval``, ``os.system``, omegaconf or numpy classes) becomes an inert placeholder
    that accepts any arguments and state and does nothing. Storages are read from the archive only for
    tensors of the returned state dict, so optimizer states are never materialised.

    Parameters
    ----------
    path
        A zip-based ``torch.save`` file, e.g. a PyTorch Lightning ``.ckpt``.

    Returns
    -------
    The flat ``{name: tensor}`` dict under the checkpoint's ``"state_dict"`` key, or the top-level dict
    when that is itself a state dict. Tensors are CPU tensors (possibly sharing storage, as with
    :func:`torch.load`).

    Raises
    ------
    ValueError
        If the file is not a zip-based torch checkpoint (e.g. the legacy format or a bare pickle), is
        truncated or corrupt, or holds no state dict of tensors.
    """
    path = Path(path)
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != _ZIP_MAGIC:
        raise ValueError(f"{path}: not a zip-based torch checkpoint")
    try:
        with zipfile.ZipFile(path) as zf:
            archive = _Archive(zf)
            obj = archive.unpickle()
            state = _find_state_dict(obj)
            if state is None:
                raise ValueError(f"{path}: the checkpoint holds no state dict of tensors")
            bad = [str(k) for k, v in state.items() if not (isinstance(k, str) and isinstance(v, _LazyTensor))]
            if bad:
                raise ValueError(f"{path}: state dict entries that are not plain tensors: {bad}")
            return {key: archive.tensor(spec) for key, spec in state.items()}
    except zipfile.BadZipFile as err:
        raise ValueError(f"{path}: truncated or corrupt torch checkpoint ({err})") from err
    except _READ_ERRORS as err:
        raise ValueError(f"{path}: truncated or corrupt torch checkpoint ({type(err).__name__}: {err})") from err


def _find_state_dict(obj: Any) -> dict | None:
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        return obj["state_dict"]
    if isinstance(obj, dict) and obj and any(isinstance(v, _LazyTensor) for v in obj.values()):
        return obj
    return None


# ---------------------------------------------------------------------------------------------- vocabulary
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
_BLOCK_PARTS = {"encoder_blocks": "encoder", "decoder_blocks": "decoder"}
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
    "gene_embedding.gene_id_embedding.weight": "gene_embedding.weight",
    "raw_proj.weight": "expression_gate.expr_proj.weight",
    "raw_proj.bias": "expression_gate.expr_proj.bias",
    "expr_mod.weight": "expression_gate.gate.weight",
    "expr_mod.bias": "expression_gate.gate.bias",
    **{f"encoder_output_bn.norm.{b}": f"posterior_norm.{b}"
       for b in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")},
    "mu_proj.weight": "to_mean.weight",
    "mu_proj.bias": "to_mean.bias",
    "logvar_proj.weight": "to_logvar.weight",
    "logvar_proj.bias": "to_logvar.bias",
    "z_query_gate.0.weight": "query_router.mlp.0.weight",
    "z_query_gate.0.bias": "query_router.mlp.0.bias",
    "z_query_gate.2.weight": "query_router.mlp.2.weight",
    "z_query_gate.2.bias": "query_router.mlp.2.bias",
    "output_proj.weight": "count_head.weight",
    "output_proj.bias": "count_head.bias",
    "px_r": "px_r",
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
    out["latent_queries"] = queries
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
    return out, config


def _ffn_multiplier(n_ffn: int, n_hidden: int) -> float:
    """A float ``m`` with ``int(m * n_hidden) == n_ffn`` (how the module sizes its SwiGLU)."""
    multiplier = n_ffn / n_hidden
    for _ in range(4):
        if int(multiplier * n_hidden) == n_ffn:
            return multiplier
        multiplier = math.nextafter(multiplier, math.inf)
    raise ValueError(f"Cannot express a feed-forward width of {n_ffn} for n_hidden={n_hidden} as a multiplier.")
