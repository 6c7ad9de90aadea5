"""Reading loader-state files without running code from them.

A loader state file is written by ``torch.save`` (a zip archive holding a pickle and the
tensor storages). ``torch.load(weights_only=True)`` cannot read it: Energon's state holds
``FlexState``, a ``dict`` subclass, which torch's safe unpickler refuses to fill. Unrestricted
pickle (``weights_only=False``) would run whatever a tampered file names.
:func:`load_state_file` reads the archive with an unpickler that admits only what a loader
state holds, the same allowlist as Megatron-Bridge's ``energon_torch_load``: Python's plain
containers and scalars, NumPy arrays, torch tensors and Energon's own state classes. Anything
else, and any truncated, corrupt or foreign file, is a :class:`StateFileError` naming the file.
"""

import io
import os
import pickle
import zipfile
from collections.abc import Callable
from typing import Any

from energon_plugins.errors import EnergonPluginsError


class StateFileError(EnergonPluginsError, ValueError):
    """A loader state file is truncated, corrupt, not a ``torch.save`` file, or holds objects
    a loader state never contains."""


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
ALLOWED_GLOBALS: dict[str, frozenset[str]] = {
    "builtins": _BUILTINS,
    "__builtin__": _BUILTINS,
    "collections": frozenset({"OrderedDict"}),
    "numpy": frozenset({"ndarray", "dtype"}),
    "numpy.core.multiarray": _NUMPY,
    "numpy._core.multiarray": _NUMPY,
    "torch._utils": frozenset({"_rebuild_tensor_v2", "_rebuild_tensor"}),
    "torch": frozenset(
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
    ),
    "torch.storage": frozenset({"UntypedStorage", "TypedStorage"}),
    "megatron.energon.state": frozenset({"FlexState"}),
    "megatron.energon.rng": frozenset({"SystemRngState"}),
    "megatron.energon.savable_loader": _ENERGON_SAVABLE_LOADER,
    "megatron.energon.flavors.webdataset.sample_loader": frozenset({"SliceState"}),
}
"""``module -> names`` a loader state file may reference (nothing else is imported)."""


class _Refused(pickle.UnpicklingError):
    """The pickle references ``what``, which is not on the allowlist."""

    def __init__(self, what: str) -> None:
        super().__init__(f"refused {what}")
        self.what = what


def _latin1_bytes(text: Any, encoding: Any = "latin1") -> bytes:
    """``_codecs.encode`` as pickle protocol 2 uses it for ``bytes``: latin-1 text only."""
    if not isinstance(text, str) or encoding != "latin1":
        raise _Refused("a _codecs.encode call that does not rebuild bytes")
    return text.encode("latin1")


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only :data:`ALLOWED_GLOBALS`; tensor storages come from the archive."""

    def __init__(self, data: bytes, read_storage: Callable[[str], bytes]) -> None:
        super().__init__(io.BytesIO(data))
        self._read_storage = read_storage
        self._storages: dict[str, Any] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("_codecs", "encode"):
            return _latin1_bytes
        if name in ALLOWED_GLOBALS.get(module, ()):
            return super().find_class("builtins" if module == "__builtin__" else module, name)
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        import torch

        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise _Refused(f"the persistent id {pid!r:.80}")
        _, storage_type, key, _location, _numel = pid
        key = key.decode() if isinstance(key, bytes) else str(key)
        if key not in self._storages:
            raw = bytearray(self._read_storage(key))
            untyped = (
                torch.frombuffer(raw, dtype=torch.uint8).untyped_storage()
                if raw
                else (torch.UntypedStorage(0))
            )
            if storage_type is torch.UntypedStorage:
                self._storages[key] = untyped
            else:
                self._storages[key] = torch.storage.TypedStorage(
                    wrap_storage=untyped, dtype=storage_type._dtype, _internal=True
                )
        return self._storages[key]


def load_state_file(path: "str | os.PathLike[str]") -> Any:
    """Read a ``torch.save`` file through the restricted unpickler (tensors land on the CPU).

    Raises:
        StateFileError: the file cannot be read, is truncated or corrupt, was not written by
            ``torch.save``, or references an object outside :data:`ALLOWED_GLOBALS`. The
            message names the file.
    """
    where = str(path)
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise StateFileError(
            f"cannot read loader state file {where!r}: it is truncated, corrupt, or not written "
            f"by torch.save ({type(exc).__name__}: {exc})"
        ) from exc
    with archive:
        pickles = [n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
        if not pickles:
            raise StateFileError(f"{where!r} is a zip archive but not a torch.save file (no data.pkl inside)")
        prefix = pickles[0][: -len("data.pkl")]

        def read_storage(key: str) -> bytes:
            return archive.read(f"{prefix}data/{key}")

        try:
            return _RestrictedUnpickler(archive.read(pickles[0]), read_storage).load()
        except _Refused as exc:
            raise StateFileError(
                f"{where!r} is not a loader state: it references {exc.what}, which a loader "
                "state never holds (allowed: Python containers and scalars, NumPy arrays, torch "
                "tensors, Energon's state classes); refusing to load it"
            ) from exc
        except (
            pickle.UnpicklingError,
            zipfile.BadZipFile,
            KeyError,
            EOFError,
            OSError,
            ValueError,
            TypeError,
            AttributeError,
            IndexError,
        ) as exc:
            raise StateFileError(
                f"cannot read loader state file {where!r}: it is truncated or corrupt "
                f"({type(exc).__name__}: {exc})"
            ) from exc
