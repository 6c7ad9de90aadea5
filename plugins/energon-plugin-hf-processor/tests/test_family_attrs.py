"""Families that share a processor class, told apart by the processor's attributes, and the
system message a template takes as a string (Pixtral and Mistral 3, both ``PixtralProcessor``)."""

import dataclasses

import pytest
from energon_plugin_hf_processor import families
from energon_plugin_hf_processor.labels import ChatRenderer


def load(processor_dirs, family):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)


def test_processor_attributes_pick_the_family_among_those_of_one_class(processor_dirs):
    pixtral, mistral3 = load(processor_dirs, "pixtral"), load(processor_dirs, "mistral3")
    assert type(pixtral) is type(mistral3)
    assert families.family_for(pixtral).name == "pixtral"  # spatial_merge_size 1
    assert families.family_for(mistral3).name == "mistral3"  # spatial_merge_size 2
    spec = families.register_family(
        dataclasses.replace(
            families.family_for(pixtral), name="pixtral-16", processor_attrs={"patch_size": 16}
        )
    )
    try:  # no "already served" error: it refines the class's spec where the attributes match
        assert families.family_for(pixtral) is spec
        assert families.family_for(mistral3).name == "mistral3"  # patch_size 14
        with pytest.raises(ValueError, match="already registered"):
            families.register_family(dataclasses.replace(spec, processor_attrs={"patch_size": 14}))
    finally:
        families._by_processor_attrs["PixtralProcessor"].remove(spec)
        families._by_name.pop("pixtral-16")
    assert families.family_for(pixtral).name == "pixtral"


def test_a_system_message_reaches_pixtrals_template_as_text(processor_dirs):
    """Pixtral's template writes ``"[INST]" + system_message``: a list of parts cannot be
    rendered, its text is what ``apply_chat_template`` renders from a string."""
    processor = load(processor_dirs, "pixtral")
    user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}
    parts = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, user]
    as_text = [{"role": "system", "content": "Be brief."}, user]
    expected = processor.apply_chat_template(as_text, tokenize=False, add_generation_prompt=True)
    assert expected == "<s>[INST]Be brief.\n\n[IMG]What is it?[/INST]"
    renderer = ChatRenderer(processor, ["</s>"], system_as_text=families.family_for(processor).system_as_text)
    assert renderer.render(parts, add_generation_prompt=True) == expected
    with pytest.raises(TypeError):
        ChatRenderer(processor, ["</s>"]).render(parts, add_generation_prompt=True)
