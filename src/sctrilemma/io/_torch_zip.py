"""Read the tensors of a ``torch.save`` zip checkpoint without executing anything from it.

The pickle inside such a checkpoint can name any Python callable. :func:`read_checkpoint_tensors` rebuilds
only the tensors of its ``"state_dict"``: every other global the pickle names is replaced by an inert
placeholder, so no callable from the file is ever looked up or run.

``torch.load(weights_only=True)`` is not enough for a Lightning checkpoint: besides the tensors its pickle holds the
hyper-parameters (an omegaconf ``DictConfig``), numpy and Python RNG states and callback states, and the weights-only
unpickler refuses every such global unless it is allowlisted (``torch.serialization.add_safe_globals``).
Allowlisting would mean importing omegaconf and constructing the objects a downloaded file names; this reader needs
neither and never looks a global up. ``tests/io/test_upstream.py`` checks both behaviours.
"""

from __future__ import annotations

import io
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
