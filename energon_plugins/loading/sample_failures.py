"""A sample that stops the loader becomes one message: the sample key, the stage, the reason.

Energon stops a loader with its ``FatalSampleError`` when a stage raises a "system" exception
(the task encoder's own ``FatalSampleError`` among them) or fails too often in a row; its
message is a compact dump of the sample and of the bound method that failed. With worker
processes, torch's ``DataLoader`` re-raises a worker's exception in the main process with the
worker's whole formatted traceback as its message (``Caught X in DataLoader worker process
N. Original Traceback ...``): sixty lines for one bad setting.

Two steps make that one line:

- Where the pipeline runs (a worker, or the main process without workers), the project's
  outermost stage (:class:`~energon_plugins.loading.errors_policy.SkipCountingDataset`) turns
  the failure into a :class:`~energon_plugins.errors.SampleFailedError` (:func:`sample_failure`),
  reading the failing stage and sample from the traceback of the real exception, which is
  kept as ``__cause__``.
- The main process (:class:`~energon_plugins.loading.dataloader.EnergonDataloader`, the
  validation loader) gives a project error that arrives as torch's worker text its own message
  back (:func:`readable_error`); the worker's traceback is its ``__cause__``, shown by
  ``--debug``.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterable, Iterator, Mapping
from typing import Any

from megatron.energon.errors import ErrorContext, FatalSampleError

from energon_plugins.errors import (
    BatchFormatError,
    EnergonPluginsError,
    PluginOutputError,
    SampleFailedError,
)
from energon_plugins.loading.storage_errors import storage_failure

BATCH_FORMAT_STAGE = "batch format"

#: Energon's pipeline functions (task-encoder methods) -> the stage named in messages.
STAGE_OF_FUNCTION = {
    "cook_crude_sample": "cook",
    "encode_sample": "encode_sample",
    "encode_sample_deferring": "encode_sample",
    "preencode_sample": "encode_sample",
    "postencode_sample": "encode_sample",
    "select_samples_to_pack": "pack",
    "pack_selected_samples": "pack",
    "batch": "batch",
    "batch_group_criterion": "batch",
    "encode_batch": "encode_batch",
}

MAX_REASON = 2000
"""Characters of the reason kept in the message (the whole chain stays in ``__cause__``)."""

_WORKER_TEXT = re.compile(r"^Caught (\w+) in DataLoader worker process (\d+)\.\nOriginal Traceback")
_FUNCTION_NAME = re.compile(r"<bound method [\w.]*?(\w+) of |<function [\w.<>]*?([\w<>]+) at ")
_KEY_IN_DUMP = re.compile(r"__key__(?:=|: )'([^']*)'")
_IN_A_ROW = re.compile(r"failed (\d+) times in a row")
_CONTEXT_IN_MESSAGE = re.compile(r" failed: (\w+\..*?) failed (?:due to system exception|\d+ times in a row)")
_TRACEBACK_FUNCTION = re.compile(r'^  File ".*", line \d+, in (\w+)$', re.M)
_FIRST_KEY = re.compile(r"'([^']*)'|\"([^\"]*)\"")
_MESSAGE = re.compile(
    r"^(?:sample|batch of samples) (?P<key>.+?) failed in stage "
    r"(?P<stage>[\w ]+?): (?P<reason>.*)$",
    re.S,
)


class LoaderSampleError(SampleFailedError, FatalSampleError):
    """What the loader raises for a sample that stops it (see the module docstring).

    Also Energon's ``FatalSampleError``, so code that catches Energon's error keeps working.
    """


class BatchFormatSampleError(SampleFailedError, BatchFormatError):
    """A batch format that failed on a batch, in the loader (also a ``BatchFormatError``)."""


class PluginOutputSampleError(SampleFailedError, PluginOutputError, FatalSampleError):
    """A plugin's output broke its contract, in the loader (also a ``PluginOutputError``, and
    Energon's ``FatalSampleError`` like :class:`LoaderSampleError`): the reason names the
    plugin and what it returned; the sample and stage say where it first showed. Raised at
    once, never counted as a skipped sample."""


def _one_line(text: str, limit: int | None = None) -> str:
    text = " ".join(str(text).split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def sample_keys(sample: Any) -> list[str]:
    """The ``__key__`` values of a sample, a batch, or a list of either (best effort)."""
    if isinstance(sample, (list, tuple)):
        return [key for item in sample for key in sample_keys(item)]
    if isinstance(sample, Mapping):
        keys = sample.get("__key__", sample.get("__keys__"))
    else:
        keys = getattr(sample, "__key__", None)
    if isinstance(keys, str):
        return [keys]
    if isinstance(keys, (list, tuple)):
        return [str(key) for key in keys]
    return []


def _keys_text(keys: list[str]) -> str:
    """``"sample 'k'"`` or ``"batch of samples 'a', 'b'"``."""
    if not keys:
        return "an unknown sample"
    if len(keys) == 1:
        return f"sample {keys[0]!r}"
    shown = ", ".join(repr(key) for key in keys[:4])
    more = f" (+{len(keys) - 4} more)" if len(keys) > 4 else ""
    return f"batch of samples {shown}{more}"


def stage_of(context_name: str) -> str:
    """The stage of an Energon ``ErrorContext`` name (``"MapDataset.<bound method
    X.encode_batch of ...>"`` -> ``encode_batch``)."""
    wrapper = context_name.split(".", 1)[0]
    if "Packing" in wrapper:
        return "pack"
    match = _FUNCTION_NAME.search(context_name)
    function = (match.group(1) or match.group(2)) if match else ""
    if function in STAGE_OF_FUNCTION:
        return STAGE_OF_FUNCTION[function]
    if "Batch" in wrapper:
        return "batch"
    return function or wrapper


def _innermost_stage(function_names: Iterable[str]) -> str | None:
    """The stage of the innermost pipeline function among ``function_names`` (outermost
    first), e.g. the frames of a traceback."""
    stages = [STAGE_OF_FUNCTION[name] for name in function_names if name in STAGE_OF_FUNCTION]
    return stages[-1] if stages else None


def _frames(exc: BaseException) -> Iterator[Any]:
    tb = exc.__traceback__
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _failing_context(exc: BaseException) -> tuple[ErrorContext | None, Any]:
    """Energon's ``ErrorContext`` that raised ``exc`` and the sample it was handling."""
    code = ErrorContext.handle_errors.__wrapped__.__code__
    for frame in _frames(exc):
        if frame.f_code is code:
            return frame.f_locals.get("self"), frame.f_locals.get("sample")
    return None, None


def _failing_batch(exc: BaseException) -> Any:
    """The batch a batch format failed on (``BatchFormatDataset.apply``'s argument)."""
    from energon_plugins.loading.formatting import BatchFormatDataset

    code = BatchFormatDataset.apply.__code__
    for frame in _frames(exc):
        if frame.f_code is code:
            return frame.f_locals.get("batch")
    return None


def _build(cls: type[SampleFailedError], keys: list[str], stage: str, reason: str) -> SampleFailedError:
    reason = _one_line(reason, MAX_REASON)
    return cls(
        f"{_keys_text(keys)} failed in stage {stage}: {reason}",
        key=keys[0] if keys else None,
        stage=stage,
        reason=reason,
    )


def sample_failure(exc: BaseException) -> SampleFailedError | None:
    """The one-message error for ``exc`` raised inside the loader's pipeline (``None``: leave
    ``exc`` as it is). Raise it ``from exc``.

    Handles Energon's ``FatalSampleError``: the stage and the sample from the ``ErrorContext``
    that raised it, the reason from the exception that context caught (a ``FatalSampleError``
    raised outside Energon's stages: the stage from the innermost pipeline function of its
    traceback); a batch format's ``BatchFormatError`` (stage ``batch format``); and a
    :class:`~energon_plugins.errors.PluginOutputError` anywhere in the chain, as a
    :class:`PluginOutputSampleError`.
    """
    from energon_plugins.loading.errors_policy import error_text

    if isinstance(exc, SampleFailedError):
        return None
    broken = plugin_output_error(exc)
    if broken is not None:  # a plugin bug, not a bad sample: said as the plugin said it
        return _plugin_output_failure(exc, broken)
    if isinstance(exc, BatchFormatError):
        return _build(
            BatchFormatSampleError, sample_keys(_failing_batch(exc)), BATCH_FORMAT_STAGE, error_text(exc)
        )
    if not isinstance(exc, FatalSampleError) or isinstance(exc, EnergonPluginsError):
        return None  # the project's own errors (BadSampleError, ...) already name the sample
    context, sample = _failing_context(exc)
    if context is None:
        stage = _innermost_stage(frame.f_code.co_name for frame in _frames(exc))
        if stage is None:
            return None  # not raised by the loader's pipeline (a task encoder called directly)
        return _build(LoaderSampleError, _KEY_IN_DUMP.findall(str(exc))[:1], stage, error_text(exc))
    keys = sample_keys(sample) or _KEY_IN_DUMP.findall(str(exc))[:1]
    caught = exc.__cause__ or exc.__context__
    reason = error_text(caught) if caught is not None else str(exc)
    in_a_row = _IN_A_ROW.search(str(exc))
    if in_a_row:
        reason += f" (Energon stopped after {in_a_row.group(1)} failures in a row)"
    return _build(LoaderSampleError, keys, stage_of(context.name), reason)


def plugin_output_error(exc: BaseException) -> PluginOutputError | None:
    """The :class:`~energon_plugins.errors.PluginOutputError` in ``exc``'s chain (``exc``
    itself, its causes and contexts), or ``None``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, PluginOutputError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _plugin_output_failure(exc: BaseException, broken: PluginOutputError) -> SampleFailedError | None:
    """The loader's error for a plugin output that broke its contract (found in ``exc``'s
    chain): the sample and stage where it showed, the plugin's message as the reason
    (``None`` outside the loader's pipeline)."""
    if isinstance(exc, BatchFormatError):  # the format stage's message adds the task encoder
        keys = sample_keys(_failing_batch(exc))
        return _build(PluginOutputSampleError, keys, BATCH_FORMAT_STAGE, str(exc))
    context, sample = _failing_context(exc)
    stage = stage_of(context.name) if context is not None else None
    if stage is None:
        stage = _innermost_stage(frame.f_code.co_name for frame in _frames(broken))
        if stage is None:
            return None  # a component called directly: its own error says it all
    keys = sample_keys(sample) or _KEY_IN_DUMP.findall(str(exc))[:1]
    return _build(PluginOutputSampleError, keys, stage, str(broken))


def worker_message(text: str, type_names: Iterable[str] = ()) -> str | None:
    """The original message inside torch's re-raised worker text (``None`` if ``text`` is not
    one): the message of the last exception of the worker's traceback."""
    match = _WORKER_TEXT.match(text)
    if match is None:
        return None
    names = [*type_names, match.group(1)]
    lines = text.rstrip("\n").split("\n")
    for index in range(len(lines) - 1, 0, -1):
        line = lines[index]
        if line.startswith((" ", "\t")):
            break  # into the traceback's frames: the exception line was not found
        head, sep, message = line.partition(": ")
        if sep and (head.rsplit(".", 1)[-1] in names):
            return "\n".join([message, *lines[index + 1 :]]).strip()
    last = lines[-1]
    return last.partition(": ")[2].strip() or last.strip()


def readable_error(exc: BaseException) -> BaseException | None:
    """What the main process raises instead of ``exc`` (``from exc``), or ``None`` to keep it.

    A project error that torch re-raised from a worker gets its own message back (the same
    class, and for a :class:`SampleFailedError` its ``key``/``stage``/``reason``); an Energon
    ``FatalSampleError`` that reached the main process untranslated becomes a
    :class:`LoaderSampleError`. A failed object-storage read becomes a
    :class:`~energon_plugins.errors.RemoteStorageError` naming the object
    (:func:`~energon_plugins.loading.storage_errors.storage_failure`).
    """
    remote = storage_failure(exc)
    if remote is not None:
        return remote
    text = str(exc)
    if _WORKER_TEXT.match(text) is None:
        return sample_failure(exc)
    if not isinstance(exc, (EnergonPluginsError, FatalSampleError)):
        return None  # a bug in a worker: its traceback is what helps
    message = worker_message(text, (type(exc).__name__,)) or text
    if isinstance(exc, SampleFailedError):
        fields = _MESSAGE.match(message)
        parts = fields.groupdict() if fields else {}
        first = _FIRST_KEY.match(parts.get("key") or "")
        key = (first.group(1) or first.group(2)) if first else None
        return type(exc)(message, key=key, stage=parts.get("stage"), reason=parts.get("reason"))
    if isinstance(exc, EnergonPluginsError):
        try:
            return type(exc)(message)
        except Exception:  # noqa: BLE001 - a class with another signature: keep torch's text
            return None
    # An Energon error the worker did not translate: the stage from the text.
    context = _CONTEXT_IN_MESSAGE.search(message)
    stage: str | None
    if context is not None:
        stage = stage_of(context.group(1))
    else:
        stage = _innermost_stage(_TRACEBACK_FUNCTION.findall(text))
    return _build(LoaderSampleError, _KEY_IN_DUMP.findall(text)[:1], stage or "unknown", message)


def with_readable_errors(batches: Iterable[Any]) -> Generator[Any, None, None]:
    """Iterate ``batches``, raising :func:`readable_error`'s error for a failure."""
    try:
        yield from batches
    except Exception as exc:
        clear = readable_error(exc)
        if clear is None:
            raise
        raise clear from exc
