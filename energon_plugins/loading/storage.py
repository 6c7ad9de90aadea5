"""Local-file reads without multi-storage-client's unrecorded metrics bookkeeping.

Energon 7.4 opens every path through multi-storage-client (MSC): a local path gets the
``__filesystem__`` profile, whose :class:`PosixFile` wraps every ``read``/``readline`` in
``file_metrics``, which calls the storage provider's ``_emit_metrics``. That wrapper times the
call, sizes the result and builds two attribute dictionaries per read, even when no
OpenTelemetry metrics are configured and nothing is recorded (the instruments are ``None``).
No MSC setting removes the wrapper: the ``opentelemetry`` config section only adds instruments
(and an optional background queue), and ``MSC_CONFIG`` only selects that file.

:func:`skip_unrecorded_local_metrics` makes the local (POSIX) provider call the read directly
when, after MSC's own lazy metrics initialisation, it holds no instrument. Where an MSC config
does configure metrics, the instruments exist and MSC's path is kept unchanged, so nothing that
would have been recorded is lost. Set ``ENERGON_PLUGINS_STORAGE_METRICS=1`` to leave MSC alone.
Worker processes forked by the loader inherit the setting.
"""

import os
from typing import Any

ENV_KEEP = "ENERGON_PLUGINS_STORAGE_METRICS"
"""Environment variable: ``1`` keeps MSC's metrics wrapper for local reads."""

_ORIGINAL: Any = None
_ORIGINAL_OWN = False  # whether the provider class defined _emit_metrics itself


def _provider_class() -> Any:
    from multistorageclient.providers.posix_file import PosixFileStorageProvider

    return PosixFileStorageProvider


def _emit_metrics_if_recorded(self: Any, operation: Any, f: Any) -> Any:
    """``_emit_metrics`` that calls ``f`` directly when the provider has no instrument."""
    if not self._metric_init_event.is_set():
        self._init_metrics()
    if (
        self._metric_gauges
        or self._metric_counters
        or getattr(self, "_metric_up_down_counters", None)
        or getattr(self, "_async_metrics_enabled", False)
    ):
        return _ORIGINAL(self, operation=operation, f=f)
    return f()


def skip_unrecorded_local_metrics() -> bool:
    """Skip MSC's metrics bookkeeping on local reads where no metric is recorded.

    Idempotent. Returns ``True`` when the skip is in effect, ``False`` when it was left off
    (``ENERGON_PLUGINS_STORAGE_METRICS=1``, or multi-storage-client without the expected
    provider internals).
    """
    global _ORIGINAL, _ORIGINAL_OWN
    if os.environ.get(ENV_KEEP, "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    try:
        cls = _provider_class()
    except ImportError:
        return False
    current = getattr(cls, "_emit_metrics", None)
    if current is _emit_metrics_if_recorded:
        return True
    if current is None or not hasattr(cls, "_init_metrics"):
        return False
    _ORIGINAL = current
    _ORIGINAL_OWN = "_emit_metrics" in cls.__dict__
    cls._emit_metrics = _emit_metrics_if_recorded
    return True


def restore_local_metrics() -> None:
    """Undo :func:`skip_unrecorded_local_metrics` (MSC's own ``_emit_metrics`` again)."""
    global _ORIGINAL
    if _ORIGINAL is None:
        return
    cls = _provider_class()
    if cls.__dict__.get("_emit_metrics") is _emit_metrics_if_recorded:
        if _ORIGINAL_OWN:
            cls._emit_metrics = _ORIGINAL
        else:
            del cls._emit_metrics  # the base class's method shows through again
    _ORIGINAL = None


def local_metrics_skipped() -> bool:
    """Whether local reads currently skip MSC's unrecorded metrics bookkeeping."""
    try:
        cls = _provider_class()
    except ImportError:
        return False
    return cls.__dict__.get("_emit_metrics") is _emit_metrics_if_recorded
