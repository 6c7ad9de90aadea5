"""The pytest plugin of energon-plugins (entry point ``pytest11``): fixtures for plugin tests.

Installing energon-plugins makes these fixtures available in every pytest run:

- ``energon_dataset(kind="vqa", num_samples=40, **kwargs)``: writes a small real Energon
  dataset (webdataset shards + Energon's index) into the test's ``tmp_path`` and returns its
  :class:`~energon_plugins.synthetic.DatasetInfo`;
- ``isolated_registry``: a freshly loaded registry in use for the test only; call it with
  plugin modules to add them (``isolated_registry(my_hooks)``), it returns the new registry;
- ``build_context(**fields)``: a :class:`~energon_plugins.BuildContext` with the offline demo
  tokenizer and the default ``hf`` image processor, any field overridable.

Importing this module loads pytest and the light part of energon-plugins only: torch,
transformers and Energon are imported inside the fixtures that need them, so pytest start-up
stays fast for every project that has energon-plugins installed.
"""

import contextlib
import itertools
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest


class RegistryFixture:
    """The ``isolated_registry`` fixture: a fresh registry in use, extendable with modules.

    Attribute access goes to the registry in use (``isolated_registry.resolve(...)``);
    calling it loads a new one with extra plugin modules and makes that the one in use.
    """

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self.registry = self._use()

    def _use(
        self, *modules: ModuleType | Any, entry_points: bool = True, distribution: str = "<local>"
    ) -> Any:
        from energon_plugins.host.manager import load_registry, use_registry

        registry = load_registry(modules, entry_points=entry_points, distribution=distribution)
        self._stack.enter_context(use_registry(registry))
        return registry

    def __call__(
        self, *modules: ModuleType | Any, entry_points: bool = True, distribution: str = "<local>"
    ) -> Any:
        """Load a fresh registry with ``modules`` added (attributed to ``distribution``),
        make it the one in use for the rest of the test, and return it.

        ``entry_points=False`` leaves out the installed distributions (the built-ins too).
        Call it again after putting a distribution on ``sys.path`` to see its entry points.
        """
        self.registry = self._use(*modules, entry_points=entry_points, distribution=distribution)
        return self.registry

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "registry":
            raise AttributeError(name)
        return getattr(self.registry, name)


@pytest.fixture
def isolated_registry() -> Iterator[RegistryFixture]:
    """A freshly loaded registry in use for this test only (call it to add plugin modules)."""
    with contextlib.ExitStack() as stack:
        yield RegistryFixture(stack)


@pytest.fixture
def energon_dataset(tmp_path: Any) -> Any:
    """Factory: ``energon_dataset(kind="vqa", num_samples=40, **kwargs) -> DatasetInfo``.

    Writes a real Energon dataset with :func:`energon_plugins.synthetic.write_dataset`
    (kinds ``vqa``, ``captioning``, ``interleaved``, ``llava``, ``chatml``; keyword
    arguments ``samples_per_shard`` (default 5), ``split_ratio``, ``image_size``, ``seed``,
    ``corrupt``) into a new folder under the test's ``tmp_path``.
    """
    counter = itertools.count()
    root = tmp_path / "energon-datasets"

    def make(kind: str = "vqa", num_samples: int = 40, **kwargs: Any) -> Any:
        from energon_plugins.synthetic import write_dataset

        kwargs.setdefault("samples_per_shard", 5)
        return write_dataset(root / f"{kind}-{next(counter)}", kind=kind, num_samples=num_samples, **kwargs)

    return make


@pytest.fixture
def build_context() -> Any:
    """Factory: ``build_context(**fields) -> BuildContext`` for building components in tests.

    Defaults: the offline demo tokenizer (``tokenizer_family="generic"``; ``"llava"`` and
    ``"qwen2"`` pick those chat formats), the built-in ``hf`` image processor (transformers
    ``CLIPImageProcessor``, default settings), ``seq_length=512``, ``micro_batch_size=2``.
    Any :class:`~energon_plugins.BuildContext` field may be given (``tokenizer=...``,
    ``image_processor=None``, ``packing=...``, ``split="val"``).
    """
    from energon_plugins.testing.context import default_context

    return default_context
