"""The self-contained reference format: one safetensors file, written atomically, loaded without unpickling.

``<dir>/<prefix>model.safetensors`` holds the module's tensors (``module.*``), the PB-Cond centroids
(``pseudobulk.centroids``), the training split's indices (``split.*``) and string metadata: the configuration, the scvi-tools registry, the gene
vocabulary (Ensembl IDs and symbols when known), the codebook's scale, versions, and a SHA-256
checksum over all of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT_NAME = "sctrilemma-reference"
# 2: the module's encoder and decoder are submodules (keys ``encoder.*`` and ``decoder.*``).
FORMAT_VERSION = "2"
REFERENCE_FILE = "model.safetensors"
MODULE_PREFIX = "module."
CENTROIDS_KEY = "pseudobulk.centroids"
EXTRA_PREFIX = "split."
LEGACY_FILES = ("model.pt",)


@dataclass
class Reference:
    """Contents of a reference file.

    Attributes
    ----------
    module_state
        The module's state dict.
    metadata
        Decoded metadata: ``config``, ``registry``, ``genes``, ``gene_symbols``, ``codebook``,
        ``attributes``, ``versions``.
    extra
        Other tensors by name without the ``split.`` prefix (e.g. ``train_indices``).
    """

    module_state: dict[str, torch.Tensor]
    metadata: dict[str, Any]
    extra: dict[str, torch.Tensor] = field(default_factory=dict)


def _to_json(value: Any) -> Any:
    """JSON-compatible copy of nested dicts/lists with numpy arrays and scalars tagged for the inverse."""
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"Cannot store a value of type {type(value).__name__} in a reference.")


def _from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__ndarray__", "dtype"}:
            return np.asarray(value["__ndarray__"], dtype=value["dtype"])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def _checksum(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for key in sorted(metadata):
        if key != "checksum":
            digest.update(f"{key}\0{metadata[key]}\0".encode())
    for key in sorted(tensors):
        tensor = tensors[key].detach().cpu().contiguous()
        if tensor.numel() == 0:  # an empty tensor may have stride 0, which cannot be viewed as bytes
            tensor = torch.empty(tensor.shape, dtype=tensor.dtype)
        digest.update(f"{key}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def versions() -> dict[str, str]:
    """Versions of the packages that wrote a reference."""
    found = {"python": sys.version.split()[0], "torch": torch.__version__}
    for package in ("sctrilemma", "scvi-tools", "anndata"):
        try:
            found[package] = version(package)
        except Exception:  # noqa: BLE001 - a missing distribution only drops one informational field
            found[package] = "unknown"
    return found


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_reference(
    directory: str | os.PathLike,
    module_state: dict[str, torch.Tensor],
    metadata: dict[str, Any],
    centroids: np.ndarray | None = None,
    *,
    overwrite: bool = False,
    prefix: str | None = None,
    extra: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write a reference atomically: a temporary file in ``directory`` renamed over the old one.

    An interrupted write leaves any earlier reference in ``directory`` intact. ``prefix`` is prepended to
    the file name (as scvi-tools' ``save(prefix=...)``); ``extra`` tensors are stored under ``split.<name>``.
    """
    from safetensors.torch import save_file

    directory = Path(directory)
    target = directory / f"{prefix or ''}{REFERENCE_FILE}"
    if target.exists() and not overwrite:
        raise ValueError(f"{target} already exists; pass `overwrite=True` to replace it.")
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {MODULE_PREFIX + k: v.detach().cpu().contiguous().clone() for k, v in module_state.items()}
    if centroids is not None:
        tensors[CENTROIDS_KEY] = torch.as_tensor(np.asarray(centroids, dtype=np.float64))
    for name, tensor in (extra or {}).items():
        tensors[EXTRA_PREFIX + name] = torch.as_tensor(tensor).detach().cpu().contiguous().clone()
    encoded = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION}
    encoded.update({key: json.dumps(_to_json(value)) for key, value in metadata.items()})
    encoded["checksum"] = _checksum(tensors, encoded)
    handle, temporary = tempfile.mkstemp(prefix=".model.", suffix=".tmp", dir=directory)
    os.close(handle)
    try:
        save_file(tensors, temporary, metadata=encoded)
        with open(temporary, "rb") as stream:
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual permissions
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return target


def read_reference(directory: str | os.PathLike, prefix: str | None = None) -> Reference:
    """Read and verify a reference (``<prefix>model.safetensors``); nothing in the file is executed.

    Raises
    ------
    FileNotFoundError
        If ``directory`` holds no reference.
    ValueError
        If the file is truncated, corrupt, of another format, or fails its checksum.
    """
    from safetensors import SafetensorError, safe_open

    directory = Path(directory)
    prefix = prefix or ""
    path = directory / f"{prefix}{REFERENCE_FILE}"
    if not path.exists():
        legacy = [prefix + name for name in LEGACY_FILES if (directory / (prefix + name)).exists()]
        if legacy:
            raise ValueError(
                f"{directory} holds {legacy[0]}, a pickle-based file; sctrilemma only loads {REFERENCE_FILE} "
                "because unpickling can execute code. Re-save the model with sctrilemma's `model.save`."
            )
        raise FileNotFoundError(f"No sctrilemma reference ({prefix}{REFERENCE_FILE}) in {directory}.")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            encoded = handle.metadata() or {}
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except (SafetensorError, OSError, ValueError) as error:
        raise ValueError(f"{path} is not a readable reference (truncated or corrupt file?): {error}") from error
    if encoded.get("format") != FORMAT_NAME:
        raise ValueError(f"{path} is a safetensors file but not an sctrilemma reference.")
    if encoded.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path} has reference format {encoded.get('format_version')}; this version of sctrilemma reads format "
            f"{FORMAT_VERSION}. Load it with the sctrilemma version that wrote it, or retrain the model."
        )
    if encoded.get("checksum") != _checksum(tensors, encoded):
        raise ValueError(f"{path} fails its checksum: the file was modified or damaged after it was written.")
    metadata = {
        key: _from_json(json.loads(value))
        for key, value in encoded.items()
        if key not in ("format", "format_version", "checksum")
    }
    centroids = tensors.pop(CENTROIDS_KEY, None)
    if centroids is not None and metadata.get("codebook") is not None:
        metadata["codebook"]["centroids"] = centroids.numpy()
    module_state = {k[len(MODULE_PREFIX) :]: v for k, v in tensors.items() if k.startswith(MODULE_PREFIX)}
    extra = {k[len(EXTRA_PREFIX) :]: v for k, v in tensors.items() if k.startswith(EXTRA_PREFIX)}
    return Reference(module_state, metadata, extra)
