"""The polylithic test dataset (crude LLaVA conversations, images in a separate store): the
synthetic library's :mod:`energon_plugins.synthetic.polylithic` under the names tests use."""

from energon_plugins.synthetic.polylithic import CRUDE_LLAVA
from energon_plugins.synthetic.polylithic import polylithic_metadataset as metadataset
from energon_plugins.synthetic.polylithic import write_polylithic_dataset as write_polylithic

__all__ = ["CRUDE_LLAVA", "metadataset", "write_polylithic"]
