"""The plugin passes the core's conformance checks (``energon_plugins.testing``)."""

import pytest

from energon_plugins.testing import check_image_processor, check_task_encoder


@pytest.mark.parametrize("kind", ["chatml", "vqa"])
def test_qwen2_vl_conforms(build_context, kind):
    processor = check_image_processor("qwen2-vl")
    context = build_context(tokenizer_family="qwen2", image_processor=processor, seq_length=1024)
    check_task_encoder("qwen2-vl", dataset_kind=kind, context=context)
