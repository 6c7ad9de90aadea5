"""``ChatMLSample`` and the cooker of the crude ``chatml`` format, from the core.

They live in :mod:`energon_plugins.encoding.chatml` (the core's ``multimodal`` encoder and the
``llava`` plugin read the same format, which ``energon-plugins convert`` writes); this module
keeps the names this plugin has always exported.
"""

from energon_plugins.encoding.chatml import (
    ChatMLSample,
    MissingFieldError,
    cook_chatml,
    image_parts,
    to_chatml,
)

__all__ = ["ChatMLSample", "MissingFieldError", "cook_chatml", "image_parts", "to_chatml"]
