"""What a conversion wrote: :class:`ConvertResult` (also the ``result`` of a finished
``convert.json``)."""

import dataclasses
import pathlib
from typing import Any


@dataclasses.dataclass(frozen=True)
class ConvertResult:
    """What a conversion wrote.

    Attributes:
        output: the dataset folder (give it as ``path`` in a datamodule config): a local path,
            or the ``msc://`` URL (a ``str``) of a dataset on object storage.
        records: records read from the source.
        written: split -> records written.
        shards: split -> shard file names.
        rejected: reason -> records in the report.
        report: the report file (``rejected.jsonl``; a URL for a remote dataset).
        seconds: wall time of this run.
        records_per_second: records handled per second while streaming (before indexing).
        resumed_from: the first record this run handled (0 unless resumed).
        empty_splits: splits with a share but no record (left out of the dataset).
        duplicate_ids: written records whose id an earlier written record has (all are
            written: samples are keyed by position).
        duplicate_id_examples: the first few such ids.
        warnings: what the user should read (most records rejected for one reason, with the
            likely fix; repeated ids).
        part: ``"K/N"`` for a part folder (``convert --part``; ``records`` then counts the
            part's records), else None.
        merged_parts: the number of parts ``convert merge`` joined (0: one run wrote it).
    """

    output: pathlib.Path | str
    records: int
    written: dict[str, int]
    shards: dict[str, list[str]]
    rejected: dict[str, int]
    report: pathlib.Path | str
    seconds: float
    records_per_second: float = 0.0
    resumed_from: int = 0
    empty_splits: tuple[str, ...] = ()
    duplicate_ids: int = 0
    duplicate_id_examples: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    part: str | None = None
    merged_parts: int = 0

    @property
    def rejected_total(self) -> int:
        """Records in the report."""
        return sum(self.rejected.values())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready mapping."""
        data = dataclasses.asdict(self)
        data.update(
            output=str(self.output),
            report=str(self.report),
            empty_splits=list(self.empty_splits),
            duplicate_id_examples=list(self.duplicate_id_examples),
            warnings=list(self.warnings),
        )
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ConvertResult":
        """Inverse of :meth:`to_json`."""
        tuples = {
            name: tuple(data.get(name, ())) for name in ("empty_splits", "duplicate_id_examples", "warnings")
        }
        return cls(
            **{
                **data,
                "output": _location(data["output"]),
                "report": _location(data["report"]),
                **tuples,
            }
        )


def _location(text: str) -> pathlib.Path | str:
    """A local path, or an ``msc://`` URL kept as text (a path would fold its ``//``)."""
    return text if text.startswith("msc://") else pathlib.Path(text)
