"""``check_source_format``: the source-format contract, on a small input the caller provides.

The reader is built through the registry (as ``energon-plugins convert --from NAME`` builds
it), made to read ``source``, then run through the real converter; the dataset it writes is
read back with Energon's own loader. Every rule is named in the
:class:`~energon_plugins.testing.ConformanceError` it raises:

- the registration and options rules of :func:`~energon_plugins.testing.check_registration`
  and :func:`~energon_plugins.testing.check_options`; ``builds``;
- ``source-pickle``: the reader pickles (workers may be spawned rather than forked);
- ``source-scan``: ``scan(source)`` yields ``(location, payload)`` pairs, ``location`` a
  non-empty string, without raising, the same ones on a second scan;
- ``source-payload-pickle``: every payload pickles (it is sent to a worker process);
- ``source-record``: ``load(payload)`` returns an :class:`energon_plugins.SourceRecord`;
- ``source-rejects``: a record the reader cannot interpret raises
  :class:`energon_plugins.RecordError` (it goes to the report with its reason), nothing else;
  with ``rejects`` given, exactly that many records of ``source`` are rejected;
- ``source-good``: at least one record of ``source`` passes the converter's checks;
- ``convert-roundtrip``: :func:`energon_plugins.convert_dataset` writes every good record and
  reports every rejected one, and Energon's loader reads the dataset back: the same
  conversations, in order, each with as many images, of the sizes the original bytes decode to.
"""

import io
import pathlib
import pickle
import tempfile
from collections.abc import Mapping
from typing import Any

from energon_plugins.testing._common import _options_json, check_and_build, fail

SPLIT = "train"


def _default_context(image_token: str) -> Any:
    from energon_plugins.encoding.sample_config import MultiModalSampleConfig
    from energon_plugins.host.context import BuildContext

    return BuildContext(sample_config=MultiModalSampleConfig(image_token=image_token))


def _scan(label: str, reader: Any, source: pathlib.Path) -> list[tuple[str, Any]]:
    try:
        items = list(reader.scan(source))
    except Exception as exc:  # noqa: BLE001 - reported under the rule
        fail(label, "source-scan", f"scan({str(source)!r}) raised {type(exc).__name__}: {exc}")
    for number, item in enumerate(items):
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and item[0]):
            fail(
                label, "source-scan", f"item {number} of scan() is {item!r:.80}, not (location: str, payload)"
            )
    if not items:
        fail(label, "source-scan", f"scan({str(source)!r}) yielded no record")
    return items


def _load_all(
    label: str, reader: Any, items: list[tuple[str, Any]], image_token: str
) -> tuple[list[tuple[str, Any]], list[tuple[str, str]]]:
    """``(good, rejected)``: ``(location, SourceRecord)`` of the records that pass the
    converter's checks, ``(location, reason)`` of the others."""
    from energon_plugins.convert.checks import sample_parts
    from energon_plugins.convert.records import RecordError, SourceRecord

    good, rejected = [], []
    for location, payload in items:
        try:
            pickle.dumps(payload)
        except Exception as exc:  # noqa: BLE001
            fail(
                label,
                "source-payload-pickle",
                f"record {location}: the payload does not pickle: {type(exc).__name__}: {exc}",
            )
        try:
            record = reader.load(payload)
        except RecordError as exc:
            rejected.append((location, exc.reason))
            continue
        except Exception as exc:  # noqa: BLE001 - the rule: bad records are RecordErrors
            fail(
                label,
                "source-rejects",
                f"record {location}: load() raised {type(exc).__name__}: {exc}; raise "
                "energon_plugins.RecordError(reason, message) for a record it cannot read",
            )
        if not isinstance(record, SourceRecord):
            fail(
                label,
                "source-record",
                f"record {location}: load() returned {type(record).__name__}, not "
                "energon_plugins.SourceRecord",
            )
        try:
            sample_parts(record, location, image_token=image_token, reencode=None)
        except RecordError as exc:
            rejected.append((location, exc.reason))
            continue
        good.append((location, record))
    return good, rejected


def _read_back(path: pathlib.Path) -> list[Any]:
    """Every sample of the converted split through Energon's loader, cooked by the core's
    ``CHATML_COOKER`` into ``ChatMLSample`` (what the task encoders read), in order."""
    from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_loader, get_val_dataset

    from energon_plugins.encoding.chat.chatml import CHATML_COOKER
    from energon_plugins.loading.transfer import configure_pinning

    class Cooking(DefaultTaskEncoder):
        cookers = [CHATML_COOKER]

    dataset = get_val_dataset(
        str(path),
        split_part=SPLIT,
        batch_size=None,
        task_encoder=Cooking(),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
    )
    loader = get_loader(dataset, watchdog_timeout_seconds=None)
    configure_pinning(loader, False)  # a check on the CPU: no pinning, no warning
    return list(loader)


def _image_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.height, image.width


def _check_roundtrip(
    label: str, name: str, source: pathlib.Path, options: Any, image_token: str, good: list, rejected: list
) -> Any:
    from energon_plugins.convert.run import convert_dataset

    with tempfile.TemporaryDirectory(prefix="check-source-format-") as tmp:
        try:
            result = convert_dataset(
                source,
                pathlib.Path(tmp) / "out",
                name,
                options=options,
                split_ratio=f"{SPLIT}=1",
                image_token=image_token,
                workers=0,
            )
        except Exception as exc:  # noqa: BLE001
            fail(label, "convert-roundtrip", f"convert_dataset raised {type(exc).__name__}: {exc}")
        written = result.written.get(SPLIT, 0)
        if written != len(good) or result.rejected_total != len(rejected):
            fail(
                label,
                "convert-roundtrip",
                f"convert wrote {written} and rejected {result.rejected_total} record(s) "
                f"({result.rejected}); loading each record gives {len(good)} good and "
                f"{len(rejected)} rejected",
            )
        try:
            samples = _read_back(pathlib.Path(result.output))  # a local output here
        except Exception as exc:  # noqa: BLE001
            fail(
                label,
                "convert-roundtrip",
                f"Energon's loader cannot read the converted dataset: {type(exc).__name__}: {exc}",
            )
        if len(samples) != len(good):
            fail(
                label,
                "convert-roundtrip",
                f"Energon's loader read {len(samples)} sample(s), convert wrote {len(good)}",
            )
        for sample, (location, record) in zip(samples, good):
            turns = [{"role": t["role"], "content": t["content"]} for t in sample.conversation]
            if turns != list(record.turns):
                fail(
                    label,
                    "convert-roundtrip",
                    f"record {location}: Energon reads back {turns!r:.200}, the reader loaded "
                    f"{record.turns!r:.200}",
                )
            sizes = [tuple(image.shape[-2:]) for image in sample.images]
            expected = [_image_size(data) for data in record.images]
            if sizes != expected:
                fail(
                    label,
                    "convert-roundtrip",
                    f"record {location}: Energon reads back images of sizes {sizes}, the "
                    f"reader's bytes decode to {expected}",
                )
    return result


def check_source_format(
    name: str,
    source: Any,
    *,
    options: Mapping[str, Any] | Any = None,
    rejects: int | None = None,
    image_token: str = "<image>",
) -> Any:
    """Check that the source format ``name`` keeps the contract on ``source``.

    Args:
        name: the registered name (or ``distribution:name``).
        source: a small input in the format (a file or folder, as ``convert`` is given); it may
            hold bad records, which must be rejected.
        options: the plugin's options to check with (``None``: defaults).
        rejects: how many records of ``source`` must be rejected (``None``: not checked).
        image_token: the image placeholder (``convert --image-token``).

    Returns:
        The :class:`~energon_plugins.ConvertResult` of the conversion (its folder is gone).

    Raises:
        ConformanceError: naming the plugin and the rule it breaks.
    """
    source = pathlib.Path(source)
    if not source.exists():
        raise FileNotFoundError(f"check_source_format: the source {str(source)!r} does not exist")
    spec, reader = check_and_build("source_format", name, options, _default_context(image_token))
    label = spec.label
    try:
        pickle.dumps(reader)
    except Exception as exc:  # noqa: BLE001
        fail(label, "source-pickle", f"the reader does not pickle: {type(exc).__name__}: {exc}")
    items = _scan(label, reader, source)
    again = [location for location, _ in _scan(label, reader, source)]
    if again != [location for location, _ in items]:
        fail(label, "source-scan", "a second scan() gave other locations or another order")
    good, rejected = _load_all(label, reader, items, image_token)
    if rejects is not None and len(rejected) != rejects:
        fail(
            label,
            "source-rejects",
            f"{len(rejected)} record(s) rejected ({rejected!r:.200}), expected {rejects}",
        )
    if not good:
        fail(
            label,
            "source-good",
            f"no record of {str(source)!r} passes the converter's checks (rejected: {rejected!r:.200})",
        )
    dumped = _options_json(spec.validate_options(options))
    return _check_roundtrip(label, spec.qualified_name, source, dumped, image_token, good, rejected)
