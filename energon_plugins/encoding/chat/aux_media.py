"""Conversation media read from an auxiliary source (Energon's polylithic datasets).

A crude conversation sample may hold no image parts and name its images instead, as LLaVA's
JSON does: ``{"image": "coco/000123.jpg", "conversations": [...]}`` (or ``"image": [...]`` /
``"images": [...]`` for several). The metadataset leaf then declares where those files are,
as an auxiliary source (``aux: {media: filesystem+msc://store/bucket/images}``, a local
``filesystem://`` folder, or a prepared dataset), and Energon hands the source to the cooker as
a keyword argument. :func:`referenced_images` reads the named files from it: through the
loader's cache pool when one is set (``cache_pool`` of the datamodule: the file is fetched to
local disk in the background while the sample waits in the shuffle buffer, and the sample
carries an Energon ``Lazy``), else directly. :func:`resolve_lazy_media` turns the ``Lazy``
objects into the decoded images just before the task encoder's ``encode_sample``
(:class:`~energon_plugins.encoding.task_encoders.base.PluginTaskEncoder` calls it).
"""

from collections.abc import Mapping
from typing import Any

from megatron.energon import WorkerConfig
from megatron.energon.cache import Lazy

MEDIA_KEYS = ("images", "image")
"""Keys of the ``json`` part that name a sample's image files in an aux source."""

DEFAULT_SOURCE = "media"
"""The aux source name read when a leaf declares several."""


class MediaSourceError(KeyError):
    """A sample names media but no aux source (or no single one) can serve them."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


def media_names(sample: Mapping[str, Any]) -> list[str]:
    """The image file names a crude sample's ``json`` part gives (``images`` or ``image``: a
    name or a list of names); empty when it names none."""
    meta = sample.get("json")
    if not isinstance(meta, Mapping):
        return []
    for key in MEDIA_KEYS:
        value = meta.get(key)
        if isinstance(value, str) and value:
            return [value]
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return list(value)
    return []


def media_source(sources: Mapping[str, Any], key: str) -> Any:
    """The aux source to read media from: the only one declared, else the one named
    :data:`DEFAULT_SOURCE`.

    Raises:
        MediaSourceError: none, or several without one named ``media``.
    """
    if len(sources) == 1:
        return next(iter(sources.values()))
    if DEFAULT_SOURCE in sources:
        return sources[DEFAULT_SOURCE]
    declared = ", ".join(sorted(sources)) or "none"
    raise MediaSourceError(
        f"sample {key!r} names its images in the json part, but the metadataset entry declares "
        f"no single aux source for them (declared: {declared}); add aux: {{{DEFAULT_SOURCE}: ...}}"
    )


def active_cache_pool() -> Any:
    """The cache pool of the loader running now (``None``: no pool, or outside a loader)."""
    if WorkerConfig.active_worker_config is None:
        return None
    return WorkerConfig._cache_pool


def referenced_images(sample: Mapping[str, Any], sources: Mapping[str, Any]) -> list[Any]:
    """The images ``sample`` names (:func:`media_names`), read from its aux source: Energon
    ``Lazy`` handles when the loader has a cache pool, else the decoded images. Empty when the
    sample names none.

    Raises:
        MediaSourceError: the sample names images but no aux source serves them.
    """
    names = media_names(sample)
    if not names:
        return []
    key = str(sample.get("__key__", "<unknown key>"))
    if not sources:
        raise MediaSourceError(
            f"sample {key!r} has no image parts and names {', '.join(names)} in its json part, but "
            "its metadataset entry declares no aux source to read them from (aux: {media: ...})"
        )
    source = media_source(sources, key)
    pool = active_cache_pool()
    if pool is None:
        return [source.get(name, sample) for name in names]
    return [pool.get_lazy(source, name) for name in names]


def resolve_lazy_media(sample: Any) -> Any:
    """``sample`` with every Energon ``Lazy`` in its ``images`` / ``videos`` replaced by the
    data (read from the cache pool's local copy when it is there, else from the source)."""
    for field in ("images", "videos"):
        values = getattr(sample, field, None)
        if isinstance(values, list) and any(isinstance(v, Lazy) for v in values):
            setattr(sample, field, [v.get(sample) if isinstance(v, Lazy) else v for v in values])
    return sample
