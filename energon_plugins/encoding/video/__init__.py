"""Video through the task encoders: frame sampling, seek-based decoding, the visual budget.

- :class:`~energon_plugins.encoding.video.options.VideoOptions`: the ``video`` option of an
  encoder (import-light: pydantic only).
- :mod:`~energon_plugins.encoding.video.sampling`: which frames are kept (pure functions of the
  video's metadata).
- :mod:`~energon_plugins.encoding.video.decode`: Energon's AV decoder reads the metadata and
  decodes only the kept frames; a corrupt file is a counted skip (``video``).
- :mod:`~energon_plugins.encoding.video.budget`: the plans a sample over its visual-token
  budget tries (fewer frames, then lower resolution) before it is skipped.

Nothing heavy is imported here; import the submodules.
"""

from energon_plugins.encoding.video.options import DEFAULT_FPS, VideoOptions

__all__ = ["DEFAULT_FPS", "VideoOptions"]
