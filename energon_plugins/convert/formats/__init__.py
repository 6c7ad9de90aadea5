"""The built-in source formats and the helpers a source-format plugin can reuse.

``normalize_turns`` (GPT-style or ChatML turns, typed content parts), ``image_bytes`` and
``read_image_file`` (paths, bytes, ``{bytes, path}`` structs; a media folder may be an
``msc://`` URL), ``media_folder`` (an image-folder option, or the source file's folder: the
remote one for a copy of a remote source), ``source_files`` (a file or a folder of them,
sorted), ``iter_json_records`` / ``decode_payload`` (streamed JSON arrays and JSON Lines)
and, for audio, ``audio_clip`` / ``audio_clips`` / ``read_audio_file`` (a path, bytes or an
``Audio`` struct -> an :class:`~energon_plugins.convert.records.AudioClip`, under the same
media rules) and ``audio_token_of``. Importing this package imports nothing heavy.
"""

from energon_plugins.convert.formats.audio import (
    audio_clip,
    audio_clips,
    audio_token_of,
    read_audio_file,
)
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
    "audio_clip",
    "audio_clips",
    "audio_token_of",
    "decode_payload",
    "image_bytes",
    "image_token_of",
    "iter_json_records",
    "media_folder",
    "normalize_turns",
    "read_audio_file",
    "read_image_file",
    "source_files",
]
