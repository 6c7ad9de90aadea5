"""Roles whose content a chat template takes as a string (``FamilySpec.text_roles``).

HunyuanOCR's template writes an answer as ``{{ message['content'] }}`` and reads a system
content's text as a string: the encoder's messages (content as typed parts) reach it with
those roles' content as their text, as a user hands them to ``apply_chat_template``.
"""

import dataclasses

import pytest
from energon_plugin_hf_processor import families
from energon_plugin_hf_processor.labels import ChatRenderer

SYSTEM, QUESTION, ANSWER = "Be brief.", "What is it?", "A red square."


def _parts(role, text):
    return {"role": role, "content": [{"type": "text", "text": text}]}


def test_system_and_answers_reach_hunyuans_template_as_strings(processor_dirs):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(processor_dirs["hunyuan-vl"], local_files_only=True)
    spec = families.family_for(processor)
    assert spec.template_text_roles == ("system", "assistant")
    user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}
    parts = [_parts("system", SYSTEM), user, _parts("assistant", ANSWER)]
    as_text = [{"role": "system", "content": SYSTEM}, user, {"role": "assistant", "content": ANSWER}]
    expected = processor.apply_chat_template(as_text, tokenize=False)
    assert expected == (
        f"<｜hy_begin▁of▁sentence｜>{SYSTEM}<｜hy_place▁holder▁no▁3｜><｜hy_place▁holder▁no▁100｜>"
        f"<｜hy_place▁holder▁no▁102｜><｜hy_place▁holder▁no▁101｜>{QUESTION}<｜hy_User｜>"
        f"{ANSWER}<｜hy_Assistant｜>"
    )
    renderer = ChatRenderer(processor, ["<｜hy_Assistant｜>"], text_roles=spec.template_text_roles)
    text, spans = renderer.render_conversation(parts)
    assert text == expected
    assert [text[a:b] for a, b in spans] == [ANSWER + "<｜hy_Assistant｜>"]
    # Handed as parts, the answer renders as a Python list and the system text is lost.
    plain = ChatRenderer(processor, ["<｜hy_Assistant｜>"]).render(parts)
    assert SYSTEM not in plain and "[{'type': 'text'" in plain


def test_system_as_text_is_the_system_role_among_the_text_roles():
    base = families.FamilySpec("text-roles-test", ("NoProcessor",))
    assert base.template_text_roles == ()
    assert dataclasses.replace(base, system_as_text=True).template_text_roles == ("system",)
    both = dataclasses.replace(base, system_as_text=True, text_roles=("assistant",))
    assert both.template_text_roles == ("system", "assistant")
    same = dataclasses.replace(base, system_as_text=True, text_roles=("system", "assistant"))
    assert same.template_text_roles == ("system", "assistant")
    assert families.families()["pixtral"].template_text_roles == ("system",)


@pytest.mark.bad_input
def test_an_image_in_a_text_role_turn_is_refused_by_name(processor_dirs):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(processor_dirs["hunyuan-vl"], local_files_only=True)
    renderer = ChatRenderer(processor, ["<｜hy_Assistant｜>"], text_roles=("system", "assistant"))
    answer = {"role": "assistant", "content": [{"type": "image"}, {"type": "text", "text": ANSWER}]}
    with pytest.raises(ValueError, match="assistant turn holds a 'image' part.*text only"):
        renderer.render_conversation([_parts("user", QUESTION), answer])
