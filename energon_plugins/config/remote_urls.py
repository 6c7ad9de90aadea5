"""Object-storage URLs as text: ``msc://PROFILE/PATH`` split, joined, cleaned, and the storage
profile any URL names.

The one place that parses the URLs multi-storage-client (MSC) resolves, for the up-front checks
(:mod:`~energon_plugins.config.remote_storage`), ``convert`` (:mod:`~energon_plugins.convert.storage`)
and the loader-state files (:mod:`~energon_plugins.loading.state_store`). Pure string handling:
nothing here reads a config or reaches a store.
"""

import os
import posixpath
import re
from typing import Any

MSC_PREFIX = "msc://"
"""The scheme Energon reads remote datasets with (multi-storage-client)."""

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_msc(path: object) -> bool:
    """Whether ``path`` is an ``msc://`` URL (checked here; other URLs are left to Energon)."""
    return str(path).startswith(MSC_PREFIX)


def is_url(text: str) -> bool:
    """Whether ``text`` is a URL (``msc://...``, or another scheme the storage client resolves)."""
    return bool(_URL.match(text))


def profile_of(path: Any) -> str:
    """The storage profile a URL names (``msc://PROFILE/...``; ``s3://bucket`` gives ``_s3-bucket``,
    the storage client's implicit profile)."""
    scheme, _, rest = os.fspath(path).partition("://")
    netloc = rest.split("/", 1)[0]
    return netloc if scheme == "msc" else f"_{scheme}-{netloc}"


def split_url(url: str) -> tuple[str, str]:
    """``(profile, path inside the profile)`` of ``msc://PROFILE/PATH``."""
    profile, _, inner = url[len(MSC_PREFIX) :].partition("/")
    return profile, inner.strip("/")


def clean_url(url: str) -> str:
    """``url`` without a trailing ``/`` and with ``.`` / ``//`` parts removed (``..`` is kept, for
    the callers that must refuse it)."""
    profile, inner = split_url(url)
    parts = [part for part in inner.split("/") if part not in ("", ".")]
    return f"{MSC_PREFIX}{profile}/{'/'.join(parts)}".rstrip("/")


def join_url(url: str, *parts: str) -> str:
    """``url`` joined with ``parts``, POSIX paths (``..`` resolved; one starting with ``/`` is
    from the profile's root; an ``msc://`` part replaces all before)."""
    for part in parts:
        if is_msc(part):
            url = part
            continue
        profile, inner = split_url(url)
        joined = posixpath.normpath(posixpath.join("/" + inner, part)).lstrip("/")
        url = f"{MSC_PREFIX}{profile}/{joined}".rstrip("/")
    return url


def parent_url(url: str) -> str:
    """The folder ``url`` is in."""
    profile, inner = split_url(url)
    return f"{MSC_PREFIX}{profile}/{posixpath.dirname(inner)}".rstrip("/")
