"""The ``cache_pool`` setting: Energon's local cache for media read from auxiliary sources.

``cache_pool: {path: /local_scratch/energon-cache, max_size_gb: 50}`` (config key and
constructor keyword alike) gives the loaders an Energon ``FileStoreCachePool``: media that a
sample names in an auxiliary source (a metadataset's ``aux:``, typically in object storage) are
fetched to ``path`` in the background while the sample waits in the shuffle buffer, and read
from there when the task encoder needs them. ``max_size_gb`` caps what the cache holds on disk
at once, over all loader processes of the datamodule (each gets an equal share); a fetch that
finds no room waits, and a sample whose file is not yet cached reads it directly.

:class:`CachePoolSettings` checks the values like every other setting (pydantic; each problem
names its field): the directory exists and is writable or can be created, the cap is positive
and at most :data:`MAX_CACHE_SIZE_GB`. Import-light: pydantic only.
"""

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from energon_plugins.strict_types import Integer, Number

MAX_CACHE_SIZE_GB = 65536.0
"""Largest ``max_size_gb`` (64 TiB): more than any local disk; a larger value is a typo."""

MAX_PREFETCH_THREADS = 256
"""Most background fetch threads per loader process."""

DEFAULT_PREFETCH_THREADS = 8
"""Background fetch threads per loader process (Energon's default)."""


def directory_problem(raw: str) -> str | None:
    """Why the cache directory ``raw`` cannot be used (``None``: it can): it must be a writable
    directory, or a path whose nearest existing parent is one (it is created on first use)."""
    path = Path(raw).expanduser()
    if path.exists():
        if not path.is_dir():
            return f"{str(path)!r} is not a directory"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"cannot write into {str(path)!r} (permission denied)"
        return None
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{str(path)!r} cannot be created: {str(parent)!r} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{str(path)!r} cannot be created: no permission to write into {str(parent)!r}"
    return None


class CachePoolSettings(BaseModel):
    """``cache_pool: {path, max_size_gb, prefetch_threads}``: where and how much media the
    loaders cache locally (Energon's ``FileStoreCachePool``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(
        min_length=1,
        description="A local directory for the cached media (created if missing; relative paths "
        "are relative to the working directory). Each loader process uses a subfolder of its own.",
    )
    max_size_gb: Number = Field(
        gt=0,
        le=MAX_CACHE_SIZE_GB,
        allow_inf_nan=False,
        description="Most gigabytes (GiB) the cache holds on disk at once, over all loader "
        "processes of the datamodule; a fetch that finds no room waits.",
    )
    prefetch_threads: Integer = Field(
        default=DEFAULT_PREFETCH_THREADS,
        ge=1,
        le=MAX_PREFETCH_THREADS,
        description="Background fetch threads per loader process.",
    )

    @field_validator("path")
    @classmethod
    def _usable_directory(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        problem = directory_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @property
    def max_bytes(self) -> int:
        """The cap in bytes."""
        return int(self.max_size_gb * 1024**3)


def cache_pool_settings(value: Any) -> CachePoolSettings | None:
    """``value`` (``None``, a mapping or :class:`CachePoolSettings`) as settings.

    Raises:
        pydantic.ValidationError: a bad field (the caller names it under ``cache_pool``).
    """
    if value is None or isinstance(value, CachePoolSettings):
        return value
    return CachePoolSettings.model_validate(value)


def is_energon_cache_pool(value: Any) -> bool:
    """Whether ``value`` is an Energon ``CachePool`` object (passed to the loaders as it is);
    checked by its methods, without importing Energon."""
    return not isinstance(value, type) and all(
        callable(getattr(value, name, None)) for name in ("get_lazy", "to_cache", "close")
    )
