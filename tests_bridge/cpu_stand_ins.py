"""What Megatron-Bridge 0.6.2 needs to run on a machine without CUDA or Transformer Engine.

Two stand-ins; nothing else of Bridge or megatron-core is replaced:

- :func:`install_transformer_engine_for_lora` (the conftest calls it before any test module
  imports Bridge). ``import megatron.bridge`` loads ``megatron.bridge.peft.lora_layers``, which
  imports ``transformer_engine.pytorch`` without a fallback and names ``te.ops.Sequential`` in a
  signature; Transformer Engine does not build without CUDA. A stub left in ``sys.modules``
  would be wrong: megatron-core probes for Transformer Engine in about a hundred places
  (``try: import transformer_engine``) and would take the stub for the real thing. So the stub
  is visible only while that one module executes: its other imports run first, without it, and
  an error names any module imported meanwhile (it could have seen the stub).
- :func:`cuda_on_cpu` (a context manager; the conftest enters it around every test). Bridge
  moves each batch with ``.cuda(non_blocking=True)``, its data setup and ``evaluate`` build
  small tensors with ``device="cuda"``, and megatron-core's timers call
  ``torch.cuda.synchronize()`` and ``torch.cuda.current_device()``. Where no GPU is available,
  inside the block, those run on the CPU. Where one is, the block changes nothing.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode

#: The Bridge modules that import Transformer Engine, without a fallback, when imported.
TE_IMPORTERS = frozenset({"megatron.bridge.peft.lora_layers"})
_TE_NAMES = ("transformer_engine", "transformer_engine.pytorch")


class _MissingClass(type):
    """The type of the stand-in classes: ``te.ops.Sequential`` is a class inside a class."""

    def __getattr__(cls, attr: str) -> type:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _missing_class(cls, attr, f"{cls.__qualname__}.{attr}")


class MissingTransformerEngine(metaclass=_MissingClass):
    """A Transformer Engine class that cannot be built: enough for annotations and isinstance."""

    def __init__(self, *args, **kwargs) -> None:
        raise RuntimeError(
            f"Transformer Engine is not installed ({type(self).__qualname__} is a CPU "
            "stand-in for Megatron-Bridge's LoRA module): this code path needs the "
            "real one"
        )


def _missing_class(owner, attr: str, qualname: str) -> type:
    """A :class:`MissingTransformerEngine` subclass, kept on ``owner`` so that it stays the same."""
    made = _MissingClass(attr, (MissingTransformerEngine,), {"__qualname__": qualname})
    setattr(owner, attr, made)
    return made


def _stub_package(name: str) -> types.ModuleType:
    """A package whose every public attribute is a :class:`MissingTransformerEngine` class."""
    module = types.ModuleType(name)
    module.__path__ = []

    def missing(attr: str) -> type:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _missing_class(module, attr, f"{name}.{attr}")

    module.__getattr__ = missing
    return module


@contextmanager
def transformer_engine_stub() -> Iterator[None]:
    """``transformer_engine`` and ``transformer_engine.pytorch`` importable inside the block only."""
    if any(name in sys.modules for name in _TE_NAMES):
        raise ImportError("transformer_engine is already imported: the CPU stand-in would hide it")
    package, pytorch = _stub_package(_TE_NAMES[0]), _stub_package(_TE_NAMES[1])
    package.pytorch = pytorch
    sys.modules.update(zip(_TE_NAMES, (package, pytorch)))
    try:
        yield
    finally:
        for name in _TE_NAMES:
            sys.modules.pop(name, None)


def top_level_imports(source: str, package: str | None) -> list[str]:
    """The modules that a module's top-level ``import`` and ``from ... import`` statements name."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            relative = "." * node.level + (node.module or "")
            names.append(importlib.util.resolve_name(relative, package) if node.level else relative)
    return names


class _LoaderWithStub(importlib.abc.Loader):
    """Runs a module's own loader with the Transformer Engine stub in place."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        """The module object, as the wrapped loader makes it."""
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        """Import the module's other imports, then execute it with the stub visible."""
        source = self._loader.get_source(module.__name__)
        for name in top_level_imports(source, module.__package__):
            if name.split(".")[0] != "transformer_engine":
                importlib.import_module(name)
        before = set(sys.modules)
        with transformer_engine_stub():
            self._loader.exec_module(module)
        leaked = sorted(set(sys.modules) - before - set(_TE_NAMES))
        if leaked:
            raise ImportError(
                f"{', '.join(leaked)} imported while the Transformer Engine stand-in "
                f"was visible to {module.__name__}"
            )


class TransformerEngineForLoRA(importlib.abc.MetaPathFinder):
    """Finds the :data:`TE_IMPORTERS` as usual and executes them with the stub in place."""

    def find_spec(self, fullname, path, target=None):
        """The module's own spec with its loader wrapped; None for every other module."""
        if fullname not in TE_IMPORTERS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderWithStub(spec.loader)
        return spec


def install_transformer_engine_for_lora() -> None:
    """Put :class:`TransformerEngineForLoRA` first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, TransformerEngineForLoRA) for finder in sys.meta_path):
        sys.meta_path.insert(0, TransformerEngineForLoRA())


def _is_cuda(device) -> bool:
    try:
        return torch.device(device).type == "cuda"
    except (TypeError, RuntimeError):
        return False


class _CudaTensorsOnCpu(TorchFunctionMode):
    """``Tensor.cuda()`` returns the tensor; ``device="cuda"`` (or a GPU index) becomes the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        if _is_cuda(kwargs.get("device")):
            kwargs = {**kwargs, "device": "cpu"}
        return func(*args, **kwargs)


@contextmanager
def cuda_on_cpu() -> Iterator[None]:
    """Inside the block, without a GPU: CUDA placements go to the CPU (see the module doc)."""
    if torch.cuda.is_available():
        yield
        return
    saved = torch.cuda.synchronize, torch.cuda.current_device
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.current_device = lambda: "cpu"
    try:
        with _CudaTensorsOnCpu():
            yield
    finally:
        torch.cuda.synchronize, torch.cuda.current_device = saved
