"""The plugin author's test kit: pytest fixtures and conformance checks.

Installing energon-plugins registers :mod:`energon_plugins.testing.pytest_plugin` with pytest
(entry point ``pytest11``), so a plugin's tests get the fixtures ``energon_dataset``,
``isolated_registry`` and ``build_context`` without a ``conftest.py``. The checks are plain
functions that raise :class:`ConformanceError` (an ``AssertionError``) naming the plugin and
the rule it breaks::

    from energon_plugins.testing import check_task_encoder

    def test_my_encoder_conforms():
        check_task_encoder("my-encoder")

Besides the checks, the kit re-exports what plugin tests need to make and look at data:
:func:`write_dataset`, :func:`build_demo_tokenizer` and :func:`save_demo_tokenizer` (synthetic
Energon datasets and offline tokenizers), :func:`write_crude_dataset` and the video helpers,
:func:`is_padding_batch`, and :func:`collect_rows` / :func:`render_page` (preview rows). A
plugin's tests import only from ``energon_plugins`` and this package.

Importing this package is light (no torch, transformers or Energon); the checks import them
when they run.
"""

from typing import TYPE_CHECKING

from energon_plugins._lazy import lazy_attributes
from energon_plugins.testing._common import ConformanceError

_LAZY = {
    "check_task_encoder": "energon_plugins.testing.task_encoder",
    "check_image_processor": "energon_plugins.testing.image_processor",
    "check_packing_strategy": "energon_plugins.testing.packing",
    "check_batch_format": "energon_plugins.testing.batch_format",
    "check_source_format": "energon_plugins.testing.source_format",
    "check_registration": "energon_plugins.testing._common",
    "check_options": "energon_plugins.testing._common",
    "default_context": "energon_plugins.testing.context",
    "batch_differences": "energon_plugins.testing.compare",
    "write_crude_dataset": "energon_plugins.testing.crude",
    "read_images": "energon_plugins.testing.crude",
    "write_megatron_lm_dataset": "energon_plugins.testing.megatron_lm",
    "video_frames": "energon_plugins.testing.video",
    "encode_video": "energon_plugins.testing.video",
    "decode_every_frame": "energon_plugins.testing.video",
    "write_vidqa_dataset": "energon_plugins.testing.video",
    "encode_tone": "energon_plugins.testing.audio",
    "decode_every_sample": "energon_plugins.testing.audio",
    "encode_video_with_tone": "energon_plugins.testing.video_audio",
    # Generated data and views of it, re-exported so plugin tests import only this kit.
    "write_dataset": "energon_plugins.synthetic",
    "build_demo_tokenizer": "energon_plugins.synthetic",
    "save_demo_tokenizer": "energon_plugins.synthetic",
    "is_padding_batch": "energon_plugins.loading.padding",
    "collect_rows": "energon_plugins.preview.rows",
    "render_page": "energon_plugins.preview.html",
}

if TYPE_CHECKING:  # pragma: no cover
    from energon_plugins.loading.padding import is_padding_batch
    from energon_plugins.preview.html import render_page
    from energon_plugins.preview.rows import collect_rows
    from energon_plugins.synthetic import build_demo_tokenizer, save_demo_tokenizer, write_dataset
    from energon_plugins.testing._common import check_options, check_registration
    from energon_plugins.testing.audio import decode_every_sample, encode_tone
    from energon_plugins.testing.batch_format import check_batch_format
    from energon_plugins.testing.compare import batch_differences
    from energon_plugins.testing.context import default_context
    from energon_plugins.testing.crude import read_images, write_crude_dataset
    from energon_plugins.testing.image_processor import check_image_processor
    from energon_plugins.testing.megatron_lm import write_megatron_lm_dataset
    from energon_plugins.testing.packing import check_packing_strategy
    from energon_plugins.testing.source_format import check_source_format
    from energon_plugins.testing.task_encoder import check_task_encoder
    from energon_plugins.testing.video import (
        decode_every_frame,
        encode_video,
        video_frames,
        write_vidqa_dataset,
    )
    from energon_plugins.testing.video_audio import encode_video_with_tone


__getattr__, __dir__ = lazy_attributes("energon_plugins.testing", globals(), _LAZY)


__all__ = [
    "ConformanceError",
    "batch_differences",
    "check_batch_format",
    "check_image_processor",
    "check_options",
    "check_packing_strategy",
    "check_registration",
    "check_source_format",
    "check_task_encoder",
    "decode_every_frame",
    "decode_every_sample",
    "encode_tone",
    "encode_video",
    "encode_video_with_tone",
    "default_context",
    "read_images",
    "video_frames",
    "write_crude_dataset",
    "write_megatron_lm_dataset",
    "write_vidqa_dataset",
    "write_dataset",
    "build_demo_tokenizer",
    "save_demo_tokenizer",
    "is_padding_batch",
    "collect_rows",
    "render_page",
]
