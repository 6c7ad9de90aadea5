"""Generated test data: real Energon datasets and offline tokenizers, written with no download.

The demo, the public testing kit (:mod:`energon_plugins.testing`), the plugins, the tests and
the benchmarks all draw their data from here. The same seed gives the same shards, byte for
byte. One module per job:

- :mod:`~energon_plugins.synthetic.shards`: :func:`write_dataset`, one prepared dataset of a
  kind (``vqa``, ``captioning``, ``interleaved``, ``llava``, ``chatml``; see :data:`KINDS`);
- :mod:`~energon_plugins.synthetic.metadataset`: :func:`write_demo_datasets`, the demo's two
  datasets and their metadataset;
- :mod:`~energon_plugins.synthetic.polylithic`: :func:`write_polylithic_dataset`, crude
  conversations whose images live in a separate store (an ``aux:`` source), and its
  metadataset;
- :mod:`~energon_plugins.synthetic.content`: the seeded scenes, questions, captions and
  conversations of each sample;
- :mod:`~energon_plugins.synthetic.images`: the PNG scenes of coloured shapes;
- :mod:`~energon_plugins.synthetic.corrupt`: broken images, JSON, fields and shards on request;
- :mod:`~energon_plugins.synthetic.cache`: the stamps that let a second call reuse what is on
  disk, and :func:`default_cache_dir`;
- :mod:`~energon_plugins.synthetic.validation`: the argument checks;
- :mod:`~energon_plugins.synthetic.info`: :class:`DatasetInfo`, what a writer wrote;
- :mod:`~energon_plugins.synthetic.tokenizer`: :func:`build_demo_tokenizer` and
  :func:`save_demo_tokenizer`, offline byte-level tokenizers with real chat templates.

Importing this package is cheap: numpy, PIL, webdataset, Energon, tokenizers and transformers
are imported only when data or a tokenizer is built.
"""

from energon_plugins.synthetic.cache import STAMP_NAME, default_cache_dir
from energon_plugins.synthetic.images import COLORS, SHAPES, draw_scene
from energon_plugins.synthetic.info import DatasetInfo
from energon_plugins.synthetic.metadataset import write_demo_datasets
from energon_plugins.synthetic.polylithic import polylithic_metadataset, write_polylithic_dataset
from energon_plugins.synthetic.shards import write_dataset
from energon_plugins.synthetic.tokenizer import (
    FAMILIES,
    LLAVA_SYSTEM_PROMPT,
    QWEN2_SPECIAL_TOKENS,
    QWEN2_SYSTEM_PROMPT,
    build_demo_tokenizer,
    save_demo_tokenizer,
)
from energon_plugins.synthetic.validation import CORRUPTIONS, KINDS, REQUIRED_FIELD

__all__ = [
    "COLORS",
    "CORRUPTIONS",
    "FAMILIES",
    "KINDS",
    "LLAVA_SYSTEM_PROMPT",
    "QWEN2_SPECIAL_TOKENS",
    "QWEN2_SYSTEM_PROMPT",
    "REQUIRED_FIELD",
    "SHAPES",
    "STAMP_NAME",
    "DatasetInfo",
    "build_demo_tokenizer",
    "default_cache_dir",
    "draw_scene",
    "save_demo_tokenizer",
    "write_dataset",
    "polylithic_metadataset",
    "write_demo_datasets",
    "write_polylithic_dataset",
]
