"""Roles whose content a chat template takes as a string (``FamilySpec.text_roles``).

HunyuanOCR's template writes an answer as ``{{ message['content'] }}`` and reads a system
content's text as a string: the encoder's messages (content as typed parts) reach it with
those roles' content as their text, as a user hands them to ``apply_chat_template``. So do
GLM-4.1V-Thinking's (``{{ msg.content }}`` for system and assistant turns; glm-4v) and
Perception LM's (a system content ``|trim``-med).
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


# zai-org/GLM-4.1V-9B-Thinking's chat_template (Glm4vProcessor, revision 3c1471e5), as quoted
# in a public renderer-validation record ("official_chat_template") and, but for the blank
# line after <|user|>, in sglang's test/srt/test_jinja_template_utils.py
# (test_detect_msg_content_pattern).
GLM_41V_THINKING_TEMPLATE = r"""[gMASK]<sop>
{%- for msg in messages %}
    {%- if msg.role == 'system' %}
<|system|>
{{ msg.content }}
    {%- elif msg.role == 'user' %}
<|user|>{{ '\n' }}

        {%- if msg.content is string %}
{{ msg.content }}
        {%- else %}
            {%- for item in msg.content %}
                {%- if item.type == 'video' or 'video' in item %}
<|begin_of_video|><|video|><|end_of_video|>
                {%- elif item.type == 'image' or 'image' in item %}
<|begin_of_image|><|image|><|end_of_image|>
                {%- elif item.type == 'text' %}
{{ item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
    {%- elif msg.role == 'assistant' %}
        {%- if msg.metadata %}
<|assistant|>{{ msg.metadata }}
{{ msg.content }}
        {%- else %}
<|assistant|>
{{ msg.content }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{% if add_generation_prompt %}<|assistant|>
{% endif %}"""

SECOND_QUESTION, SECOND_ANSWER = "And its shape?", "It is a square."


def _two_turns_with_a_system_turn(image):
    """A ChatML sample (system, an image, two question/answer turns) and the messages a user
    hands ``apply_chat_template`` for it, the ``text_roles`` turns' content as strings."""
    from energon_plugins import ChatMLSample

    turns = [
        ("system", SYSTEM),
        ("user", f"<image>\n{QUESTION}"),
        ("assistant", ANSWER),
        ("user", SECOND_QUESTION),
        ("assistant", SECOND_ANSWER),
    ]
    sample = ChatMLSample(
        __key__="k",
        __restore_key__=(),
        conversation=[{"role": r, "content": c} for r, c in turns],
        images=[image],
    )
    return sample, [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": QUESTION}]},
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": [{"type": "text", "text": SECOND_QUESTION}]},
        {"role": "assistant", "content": SECOND_ANSWER},
    ]


def _encoded(processor_dir, sample):
    from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
    from energon_plugin_hf_processor.options import HFProcessorOptions

    from energon_plugins import BuildContext

    options = HFProcessorOptions(processor=str(processor_dir))
    return HFProcessorTaskEncoder(BuildContext(seq_length=2048), options).encode_sample(sample)


def _labelled_texts(tokenizer, encoded):
    """The text of every run of labelled tokens of an encoded sample."""
    labelled = (encoded.labels != -100).tolist() + [False]
    runs, start = [], None
    for i, on in enumerate(labelled):
        if on and start is None:
            start = i
        elif not on and start is not None:
            runs.append(tokenizer.decode(encoded.input_ids[start:i]))
            start = None
    return runs


def test_glm_4_1v_thinkings_template_takes_system_and_answers_as_strings(tmp_path, make_image):
    """With GLM-4.1V-9B-Thinking's own template (``{{ msg.content }}`` for system and
    assistant turns) the encoder's ids equal ``apply_chat_template`` on string content, and
    the labels cover exactly the answers; handed as parts, those turns render as lists."""
    from energon_plugin_hf_processor.tiny import build_tiny_processor
    from transformers import AutoProcessor

    built = build_tiny_processor("glm-4v")
    built.chat_template = GLM_41V_THINKING_TEMPLATE
    built.save_pretrained(str(tmp_path))
    processor = AutoProcessor.from_pretrained(str(tmp_path), local_files_only=True)
    assert processor.chat_template == GLM_41V_THINKING_TEMPLATE
    spec = families.family_for(processor)
    assert spec.name == "glm-4v" and spec.template_text_roles == ("system", "assistant")

    sample, messages = _two_turns_with_a_system_turn(make_image((56, 56), 7))
    expected = processor.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
    encoded = _encoded(tmp_path, sample)
    assert encoded.input_ids.tolist() == expected["input_ids"][0].tolist()
    text = processor.apply_chat_template(messages, tokenize=False)
    assert f"<|system|>\n{SYSTEM}<|user|>" in text and f"<|assistant|>\n{ANSWER}<|user|>" in text
    labelled = _labelled_texts(processor.tokenizer, encoded)
    assert labelled == [ANSWER, SECOND_ANSWER]  # no token closes a GLM-V answer

    # Without text_roles, the typed parts reach {{ msg.content }} as Python lists.
    parts = [_parts("system", SYSTEM), _parts("user", QUESTION), _parts("assistant", ANSWER)]
    plain = ChatRenderer(processor, ()).render(parts)
    assert "<|system|>\n[{'type': 'text'" in plain and "<|assistant|>\n[{'type': 'text'" in plain
    fixed = ChatRenderer(processor, (), text_roles=spec.template_text_roles).render(parts)
    assert "[{'type'" not in fixed and f"<|assistant|>\n{ANSWER}" in fixed


def test_perception_lms_system_turn_renders_its_text(processor_dirs, make_image):
    """Perception LM's template writes a system content with ``|trim``: given as a string
    (``text_roles=("system",)``) it renders as its text, as ``apply_chat_template`` on a
    string system content; handed as parts, it renders as a Python list."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(processor_dirs["perception-lm"], local_files_only=True)
    spec = families.family_for(processor)
    assert spec.template_text_roles == ("system",)
    sample, messages = _two_turns_with_a_system_turn(make_image((56, 56), 8))
    # Only the system turn goes as a string: the template reads every other turn's parts.
    messages = [
        m if m["role"] == "system" or not isinstance(m["content"], str) else _parts(m["role"], m["content"])
        for m in messages
    ]
    text = processor.apply_chat_template(messages, tokenize=False)
    assert text.startswith(
        f"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{SYSTEM}<|eot_id|>"
    )
    renderer = ChatRenderer(processor, ["<|eot_id|>"], text_roles=spec.template_text_roles)
    as_parts = [_parts(m["role"], m["content"]) if isinstance(m["content"], str) else m for m in messages]
    assert renderer.render(as_parts) == text
    assert "[{'type': 'text'" in ChatRenderer(processor, ["<|eot_id|>"]).render(as_parts)

    expected = processor.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
    encoded = _encoded(processor_dirs["perception-lm"], sample)
    assert encoded.input_ids.tolist() == expected["input_ids"][0].tolist()
    labelled = _labelled_texts(processor.tokenizer, encoded)
    assert labelled == [ANSWER + "<|eot_id|>", SECOND_ANSWER + "<|eot_id|>"]
