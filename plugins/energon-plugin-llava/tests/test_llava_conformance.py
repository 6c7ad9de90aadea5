"""The plugin passes the core's conformance checks (``energon_plugins.testing``)."""

import pytest

from energon_plugins.testing import check_image_processor, check_task_encoder


def test_llava_clip_conforms():
    check_image_processor("llava-clip")


@pytest.mark.parametrize("kind", ["llava", "vqa"])
def test_llava_conforms(build_context, kind):
    context = build_context(tokenizer_family="llava", image_processor=None, seq_length=1024)
    check_task_encoder("llava", dataset_kind=kind, context=context)
