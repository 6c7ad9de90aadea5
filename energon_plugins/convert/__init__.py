"""``energon-plugins convert``: the data people have -> a prepared Energon dataset.

Small modules, each with one job: ``records`` (what a reader returns, :class:`SourceRecord`
with its :class:`AudioClip` list, :class:`RecordError`), ``formats`` (the built-in readers and their helpers), ``checks`` (the
checks every record passes and the sample it becomes), ``splits``, ``shards`` (size-bounded,
byte-reproducible, resumable tar shards), ``report`` (rejected records), ``state`` (resume),
``parallel`` (ordered worker map), ``interrupt`` (SIGINT / SIGTERM, child processes),
``prepare`` (Energon's prepare API and ``dataset.yaml``), ``output`` (the output folder: what
``--overwrite`` may remove), ``progress`` (counting the source's records), ``diagnose`` (hints
when most records fail for one reason), ``settings``, ``workers`` (what runs per record), ``result`` and ``run`` (:func:`convert_dataset`).
``formats.media`` reads a record's media only from inside the folders it was given;
``formats.audio`` its audio clips (paths, bytes, ``Audio`` structs) through it. ``parts``
(``--part K/N``: which records a part converts, a part folder) and ``merge``
(:func:`merge_parts`: the parts -> one dataset, the bytes of one run). On object storage
(``msc://``): ``storage`` (URLs, reads, uploads, the error wording), ``formats.remote_media``
(a remote media folder, the same guarantees), ``staging`` (the local copy of a remote source,
the upload of a finished dataset) and ``remote_run`` (the runs that use them). Importing this
package imports nothing heavy.
"""

from energon_plugins._lazy import lazy_attributes
from energon_plugins.convert.records import REASONS, AudioClip, RecordError, SourceRecord

_LAZY = {
    "convert_dataset": "energon_plugins.convert.run",
    "ConvertResult": "energon_plugins.convert.result",
    "ConvertSettings": "energon_plugins.convert.settings",
    "merge_parts": "energon_plugins.convert.merge",
}

__getattr__, __dir__ = lazy_attributes("energon_plugins.convert", globals(), _LAZY)

__all__ = [
    "REASONS",
    "AudioClip",
    "ConvertResult",
    "ConvertSettings",
    "RecordError",
    "SourceRecord",
    "convert_dataset",
    "merge_parts",
]
