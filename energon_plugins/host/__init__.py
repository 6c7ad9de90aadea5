"""The host layer: hook specifications, kinds, the registry and how plugins are loaded.

Nothing here imports torch, transformers or Energon. The component protocols of
:mod:`energon_plugins.host.protocols` (for plugin authors and type checkers) are re-exported
here; they import only :mod:`typing`.
"""

from energon_plugins.host.protocols import (
    PROTOCOL_FOR_KIND,
    BatchFormatProtocol,
    ImageProcessorProtocol,
    PackingStrategyProtocol,
    SourceFilesProtocol,
    SourceFormatProtocol,
    TaskEncoderProtocol,
)

__all__ = [
    "PROTOCOL_FOR_KIND",
    "BatchFormatProtocol",
    "ImageProcessorProtocol",
    "PackingStrategyProtocol",
    "SourceFilesProtocol",
    "SourceFormatProtocol",
    "TaskEncoderProtocol",
]
