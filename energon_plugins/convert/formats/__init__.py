"""The built-in source formats and the helpers a source-format plugin can reuse.

``normalize_turns`` (GPT-style or ChatML turns, typed content parts), ``image_bytes`` and
``read_image_file`` (paths, bytes, ``{bytes, path}`` structs; a media folder may be an
``msc://`` URL), ``media_folder`` (an image-folder option, or the source file's folder: the
remote one for a copy of a remote source), ``source_files`` (a file or a folder of them,
sorted) and ``iter_json_records`` / ``decode_payload`` (streamed JSON arrays and JSON Lines).
Importing this package imports nothing heavy.
"""

from energon_plugins.convert.formats.common import (
    as_list,
    image_bytes,
    image_token_of,
    media_folder,
    normalize_turns,
    read_image_file,
    source_files,
)
from energon_plugins.convert.formats.json_stream import decode_payload, iter_json_records

__all__ = [
    "as_list",
    "decode_payload",
    "image_bytes",
    "image_token_of",
    "iter_json_records",
    "media_folder",
    "normalize_turns",
    "read_image_file",
    "source_files",
]
