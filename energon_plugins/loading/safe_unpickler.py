"""The unpickler of loader-state files: an allowlist of globals, each behind a guard.

Naming an allowed global is not enough to be safe: ``builtins.list(range(10**12))``,
``bytes(2**40)``, ``torch.UntypedStorage(2**40)`` or a NumPy object array whose declared shape
disagrees with its data allocate without bound (or crash NumPy) although every name is on the
list. So :class:`RestrictedUnpickler` hands the pickle a guarded stand-in for each allowed
global (:func:`safe_global`):

- container and scalar constructors take only values the pickle already holds (never an
  iterator such as ``range``, never a size);
- torch storage classes are tokens, only good as the type in a storage's persistent id; the
  storage's bytes come from the archive, read through a callback that checks its declared size
  (:class:`StorageRequest`) before allocating;
- a tensor may address no more elements than its storage holds; a NumPy array is rebuilt only
  from a plain dtype and exactly the bytes its shape needs;
- ``BUILD`` (``__setstate__``) applies only to the allowed state classes, NumPy arrays and
  dtypes, with the state NumPy itself would write.

It runs on :class:`pickle._Unpickler` (the pure-Python unpickler), whose opcode table can be
extended: the C unpickler cannot check ``BUILD``. Loader states are small, so its speed does
not matter here.
"""

import _compat_pickle
import collections
import dataclasses
import io
import math
import pickle
import re
from collections.abc import Callable
from typing import Any

_BUILTINS = frozenset(
    {
        "list",
        "dict",
        "tuple",
        "set",
        "frozenset",
        "bytes",
        "bytearray",
        "str",
        "int",
        "float",
        "bool",
        "complex",
        "slice",
        "range",
    }
)
_NUMPY = frozenset({"_reconstruct", "scalar"})
_ENERGON_SAVABLE_LOADER = frozenset(
    {
        "SavableCheckpoint",
        "SavableDataLoaderState",
        "SavableDatasetCheckpoint",
        "SavableDatasetState",
    }
)
_STORAGE_TYPES = frozenset(
    {
        "UntypedStorage",
        "ByteStorage",
        "CharStorage",
        "ShortStorage",
        "IntStorage",
        "LongStorage",
        "HalfStorage",
        "FloatStorage",
        "DoubleStorage",
        "BFloat16Storage",
        "BoolStorage",
        "ComplexFloatStorage",
        "ComplexDoubleStorage",
    }
)
ALLOWED_GLOBALS: dict[str, frozenset[str]] = {
    "builtins": _BUILTINS,
    "__builtin__": _BUILTINS,
    "collections": frozenset({"OrderedDict"}),
    "numpy": frozenset({"ndarray", "dtype"}),
    "numpy.core.multiarray": _NUMPY,
    "numpy._core.multiarray": _NUMPY,
    "torch._utils": frozenset({"_rebuild_tensor_v2", "_rebuild_tensor"}),
    "torch": _STORAGE_TYPES,
    "torch.storage": frozenset({"UntypedStorage", "TypedStorage"}),
    "megatron.energon.state": frozenset({"FlexState"}),
    "megatron.energon.rng": frozenset({"SystemRngState"}),
    "megatron.energon.savable_loader": _ENERGON_SAVABLE_LOADER,
    "megatron.energon.flavors.webdataset.sample_loader": frozenset({"SliceState"}),
}
"""``module -> names`` a loader state file may reference (nothing else is imported)."""

MAX_TENSOR_DIMS = 64
"""Most dimensions a tensor or array of a loader state may have."""

_STORAGE_KEY = re.compile(r"[A-Za-z0-9_]{1,64}")


class Refused(pickle.UnpicklingError):
    """The pickle references ``what``, which is not on the allowlist (or not in that way)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"refused {what}")
        self.what = what


class Corrupt(pickle.UnpicklingError):
    """The pickle or archive contradicts itself (sizes, shapes, storages); the message says how."""


@dataclasses.dataclass(frozen=True)
class StorageType:
    """What the pickle gets for ``torch.<name>``: a token for a storage's persistent id."""

    name: str
    dtype: Any  # a torch.dtype; torch.uint8 for an untyped storage
    untyped: bool


@dataclasses.dataclass(frozen=True)
class StorageRequest:
    """A storage the pickle asks for: its archive key and the size it declares."""

    key: str
    numel: int
    itemsize: int

    @property
    def nbytes(self) -> int:
        """The bytes the storage declares (``numel * itemsize``)."""
        return self.numel * self.itemsize


@dataclasses.dataclass(frozen=True)
class _ArrayType:
    """What the pickle gets for ``numpy.ndarray``: only good as ``_reconstruct``'s subtype."""


_PLAIN_VALUES = (str, bytes, bytearray, int, float, complex, type(None))
_MATERIALISED = (list, tuple, dict, set, frozenset, *_PLAIN_VALUES)


def _guarded(constructor: Callable[..., Any]) -> Callable[..., Any]:
    """``constructor`` restricted to at most three arguments the pickle already holds (a size
    for ``bytes`` / ``bytearray``, or an iterator such as ``range``, is refused)."""
    name = getattr(constructor, "__name__", str(constructor))

    def build(*args: Any) -> Any:
        if len(args) > 3 or not all(isinstance(a, _MATERIALISED) for a in args):
            kinds = ", ".join(type(a).__name__ for a in args)
            raise Refused(f"builtins.{name}({kinds})")
        if constructor in (bytes, bytearray) and args and isinstance(args[0], int):
            raise Refused(f"builtins.{name}(<a size>)")
        return constructor(*args)

    build.__name__ = name
    return build


def _latin1_bytes(text: Any, encoding: Any = "latin1") -> bytes:
    """``_codecs.encode`` as pickle protocol 2 uses it for ``bytes``: latin-1 text only."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise Refused("a _codecs.encode call that does not rebuild bytes")
    return text.encode("latin1")


def _dims(values: Any, what: str) -> tuple[int, ...]:
    if not isinstance(values, (tuple, list)) or len(values) > MAX_TENSOR_DIMS:
        raise Corrupt(f"a {what} that is not a tuple of at most {MAX_TENSOR_DIMS} integers")
    if not all(type(v) is int and v >= 0 for v in values):
        raise Corrupt(f"a {what} with a negative or non-integer entry: {tuple(values)!r:.80}")
    return tuple(values)


def _rebuild_tensor_v2(
    storage: Any,
    storage_offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any = False,
    backward_hooks: Any = None,
    metadata: Any = None,
) -> Any:
    """``torch._utils._rebuild_tensor_v2`` for a storage of the archive, addressing no more
    elements than the storage holds, without hooks."""
    import torch

    if not isinstance(storage, torch.storage.TypedStorage):
        raise Corrupt(f"a tensor whose storage is a {type(storage).__name__}, not one of the archive")
    shape, strides = _dims(size, "tensor size"), _dims(stride, "tensor stride")
    if type(storage_offset) is not int or storage_offset < 0 or len(shape) != len(strides):
        raise Corrupt(f"a tensor with offset {storage_offset!r:.40} and size/stride of different lengths")
    numel, held = math.prod(shape), storage._untyped_storage.nbytes() // storage.dtype.itemsize
    if numel and storage_offset + sum((n - 1) * s for n, s in zip(shape, strides)) >= held:
        raise Corrupt(f"a tensor of size {shape} that reaches past its storage of {held:,} elements")
    if numel > held:
        raise Corrupt(f"a tensor of {numel:,} elements over a storage of {held:,}")
    if not isinstance(requires_grad, bool) or backward_hooks:
        raise Refused("a tensor with gradient hooks")
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, (bool, int)) for v in metadata.values())
    ):
        raise Corrupt("a tensor with metadata that is not flags")
    return torch._utils._rebuild_tensor_v2(
        storage, storage_offset, shape, strides, requires_grad, collections.OrderedDict(), metadata
    )


def _rebuild_tensor(storage: Any, storage_offset: Any, size: Any, stride: Any) -> Any:
    """``torch._utils._rebuild_tensor`` with the checks of :func:`_rebuild_tensor_v2`."""
    return _rebuild_tensor_v2(storage, storage_offset, size, stride)


def _reconstruct(subtype: Any, shape: Any, dtype: Any) -> Any:
    """``numpy``'s ``_reconstruct`` as pickles use it: an empty plain array (``BUILD`` fills it)."""
    import numpy as np

    if not isinstance(subtype, _ArrayType) or math.prod(_dims(shape, "array shape")) > 1:
        raise Refused("numpy's _reconstruct of anything but an empty plain array")
    return np.ndarray.__new__(np.ndarray, (0,), np.dtype(np.uint8))


def _numpy_dtype(*args: Any) -> Any:
    """``numpy.dtype(...)`` for a plain dtype (no Python objects inside)."""
    import numpy as np

    if len(args) > 3 or not all(isinstance(a, (str, bool, int)) for a in args):
        raise Refused("numpy.dtype of anything but a type code")
    dtype = np.dtype(*args)
    if dtype.hasobject:
        raise Refused("a numpy dtype holding Python objects")
    return dtype


def _numpy_scalar(dtype: Any, data: Any = None) -> Any:
    """``numpy``'s ``scalar`` for a plain dtype and exactly its bytes."""
    import numpy as np

    if not isinstance(dtype, np.dtype) or dtype.hasobject or not isinstance(data, bytes):
        raise Refused("a numpy scalar of anything but a plain dtype and its bytes")
    if len(data) != dtype.itemsize:
        raise Corrupt(f"a numpy scalar of {dtype} with {len(data)} bytes instead of {dtype.itemsize}")
    return np.frombuffer(data, dtype=dtype)[0].copy()


def safe_global(module: str, name: str) -> Any:
    """The guarded stand-in the pickle gets for ``module.name`` (see the module docstring).

    Raises:
        Refused: ``module.name`` is not in :data:`ALLOWED_GLOBALS`.
    """
    if (module, name) == ("_codecs", "encode"):
        return _latin1_bytes
    if name not in ALLOWED_GLOBALS.get(module, ()):
        raise Refused(f"{module}.{name}")
    if module in ("builtins", "__builtin__"):
        import builtins

        return _guarded(getattr(builtins, name))
    if module == "collections":
        return _guarded(collections.OrderedDict)
    if module in ("torch", "torch.storage"):
        import torch

        untyped = name in ("UntypedStorage", "TypedStorage")
        return StorageType(name, torch.uint8 if untyped else getattr(torch, name)._dtype, untyped)
    if module == "torch._utils":
        return _rebuild_tensor_v2 if name == "_rebuild_tensor_v2" else _rebuild_tensor
    if module == "numpy":
        return _ArrayType() if name == "ndarray" else _numpy_dtype
    if module.startswith("numpy"):
        return _reconstruct if name == "_reconstruct" else _numpy_scalar
    import importlib

    return getattr(importlib.import_module(module), name)  # Energon's state classes


def _state_classes() -> tuple[type, ...]:
    import importlib

    return tuple(
        getattr(importlib.import_module(module), name)
        for module, names in ALLOWED_GLOBALS.items()
        if module.startswith("megatron.")
        for name in names
    )


def _check_plain_state(state: Any) -> None:
    """A ``BUILD`` state for an Energon state class: attributes by plain name."""
    parts = state if isinstance(state, tuple) and len(state) == 2 else (state,)
    for part in parts:
        if part is None:
            continue
        if not isinstance(part, dict) or not all(isinstance(k, str) and not k.startswith("__") for k in part):
            raise Corrupt("an object state that is not a mapping of plain attribute names")


def _check_array_state(array: Any, state: Any) -> None:
    """A ``BUILD`` state for a NumPy array: a plain dtype and exactly the bytes of its shape."""
    import numpy as np

    if not (isinstance(state, tuple) and len(state) == 5 and state[0] == 1):
        raise Corrupt("a numpy array state of an unknown layout")
    _, shape, dtype, fortran, data = state
    if not isinstance(dtype, np.dtype) or dtype.hasobject or not isinstance(fortran, bool):
        raise Refused("a numpy array holding Python objects")
    needed = math.prod(_dims(shape, "array shape")) * dtype.itemsize
    if not isinstance(data, (bytes, bytearray)) or len(data) != needed:
        got = len(data) if isinstance(data, (bytes, bytearray)) else type(data).__name__
        raise Corrupt(f"a numpy array of shape {tuple(shape)} and dtype {dtype} with {got} bytes of data")


_PurePythonUnpickler: Any = pickle._Unpickler  # typeshed hides its opcode table and stack


class RestrictedUnpickler(_PurePythonUnpickler):
    """Unpickles ``data`` with :func:`safe_global`; storages come from ``read_storage``.

    ``read_storage(request)`` returns the bytes of the storage a persistent id declares (it
    checks the declared size against the archive before allocating).
    """

    dispatch = dict(_PurePythonUnpickler.dispatch)

    def __init__(self, data: bytes, read_storage: Callable[[StorageRequest], bytearray]) -> None:
        super().__init__(io.BytesIO(data))
        self._read_storage = read_storage
        self._storages: dict[str, Any] = {}
        self._state_classes = _state_classes()

    def find_class(self, module: str, name: str) -> Any:
        """The guarded stand-in of ``module.name`` (:func:`safe_global`)."""
        module, name = str(module), str(name)
        if self.proto < 3:  # Python 2's names, as protocol 2 writes them (xrange is range)
            module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        return safe_global(module, name)

    def persistent_load(self, pid: Any) -> Any:
        """The storage ``pid = ("storage", type, key, location, numel)`` names, from the archive."""
        import torch

        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise Refused(f"the persistent id {pid!r:.80}")
        _, storage_type, key, location, numel = pid
        key = key.decode("ascii", "replace") if isinstance(key, bytes) else key
        if not isinstance(storage_type, StorageType):
            raise Refused(f"a storage of type {type(storage_type).__name__}")
        if not isinstance(key, str) or not _STORAGE_KEY.fullmatch(key) or not isinstance(location, str):
            raise Corrupt(f"a storage with the key {key!r:.40} at {location!r:.40}")
        if type(numel) is not int or numel < 0:
            raise Corrupt(f"storage {key!r} declares {numel!r:.40} elements")
        itemsize = storage_type.dtype.itemsize
        if key in self._storages:
            known = self._storages[key]
            if known.nbytes() != numel * itemsize:
                raise Corrupt(f"storage {key!r} is named twice with different sizes")
        else:
            raw = self._read_storage(StorageRequest(key, numel, itemsize))
            self._storages[key] = (
                torch.frombuffer(raw, dtype=torch.uint8).untyped_storage() if raw else torch.UntypedStorage(0)
            )
        untyped = self._storages[key]
        if storage_type.untyped:
            return untyped
        return torch.storage.TypedStorage(wrap_storage=untyped, dtype=storage_type.dtype, _internal=True)

    def load_build(self) -> None:
        """``BUILD``, for the allowed state classes, NumPy arrays and dtypes only."""
        import numpy as np

        state, inst = self.stack[-1], self.stack[-2]
        if type(inst) is np.ndarray:
            _check_array_state(inst, state)
        elif isinstance(inst, np.dtype):
            if state != inst.__reduce__()[2]:
                raise Refused("a numpy dtype with a state numpy would not write")
        elif isinstance(inst, self._state_classes):
            _check_plain_state(state)
        else:
            raise Refused(f"setting the state of a {type(inst).__name__}")
        super().load_build()

    dispatch[pickle.BUILD[0]] = load_build
