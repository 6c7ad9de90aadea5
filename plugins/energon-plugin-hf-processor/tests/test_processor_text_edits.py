"""What a processor does to the text it is given, where it does not report it.

Placeholder expansions computed for a processor that does not report them (Idefics2): the
records must rebuild exactly the text the processor tokenized (applied to the rendered text
they give the processor's own token ids), with and without image splitting, for adjacent
images, an image followed directly by text, and text without images. Text a processor puts
before every text (Janus's default system prompt) is measured by its length.
"""

import pytest
import torch
from energon_plugin_hf_processor.placeholder_offsets import idefics2_offsets, register_placeholder_offsets
from energon_plugin_hf_processor.processor import prepended_chars

TEXTS = {
    "adjacent": ("User:<image><image>What?<end_of_utterance>\nAssistant: Red.<end_of_utterance>\n", 2),
    "text-after": ("User: Look <image> and<image>\nSay.<end_of_utterance>\n", 2),
    "no-image": ("User: Hi.<end_of_utterance>\nAssistant: Hello.<end_of_utterance>\n", 0),
}


def apply(text, records):
    """``text`` with every record's span replaced by its replacement."""
    out, cursor = [], 0
    for r in records:
        start, end = r["span"]
        out += [text[cursor:start], r["replacement"]]
        cursor = end
    return "".join(out) + text[cursor:]


@pytest.mark.parametrize("splitting", [False, True], ids=["whole", "split"])
@pytest.mark.parametrize("case", list(TEXTS))
def test_idefics2_records_rebuild_the_processors_text(case, splitting, processor_dirs, make_image):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(processor_dirs["idefics2"], local_files_only=True)
    processor.image_processor.do_image_splitting = splitting
    text, n = TEXTS[case]
    images = [make_image((40 + 10 * i, 30), i) for i in range(n)]
    out = processor(text=[text], images=[images] if images else None, return_tensors="pt")
    records = idefics2_offsets(processor, text)
    expanded = apply(text, records)
    ids = processor.tokenizer([expanded], add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert torch.equal(ids, out["input_ids"])
    image_records = [r for r in records if r["type"] == "image"]
    assert len(image_records) == n
    for r in records:  # each new span holds exactly its replacement
        assert expanded[slice(*r["new_span"])] == r["replacement"]
    per_image = processor.image_seq_len * (5 if splitting else 1)
    assert all(r["replacement"].count(processor.image_token) == per_image for r in image_records)


@pytest.mark.bad_input
def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="already registered"):
        register_placeholder_offsets("idefics2", lambda processor, text: [])
    register_placeholder_offsets("idefics2", idefics2_offsets)  # the same function again: fine


@pytest.mark.parametrize("family", ["janus", "qwen2-vl", "idefics2"])
def test_prepended_chars_measure_the_text_a_processor_adds(family, processor_dirs):
    from transformers import AutoProcessor
    from transformers.models.janus.processing_janus import DEFAULT_SYSTEM_PROMPT

    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    expected = len(DEFAULT_SYSTEM_PROMPT) if family == "janus" else 0
    assert prepended_chars(processor) == expected
    if family == "janus":
        processor.use_default_system_prompt = False
        assert prepended_chars(processor) == 0


@pytest.mark.bad_input
def test_a_family_naming_unknown_placeholder_offsets_is_refused_by_name():
    from energon_plugin_hf_processor.encoder import placeholder_offsets_of
    from energon_plugin_hf_processor.families import FamilySpec

    from energon_plugins import ConfigError

    spec = FamilySpec("my-vlm", ("MyVLMProcessor",), placeholder_offsets="my-expansion")
    with pytest.raises(
        ConfigError, match=r"family 'my-vlm' names placeholder offsets 'my-expansion'.*idefics2"
    ):
        placeholder_offsets_of(spec)
