"""Tiny offline processors of real model families, for tests, the demo and the benchmarks.

:func:`save_tiny_processor` writes a processor directory that ``AutoProcessor.from_pretrained``
loads without a network, as a user's model directory would: the family's transformers
processor class, its image (and video) processor with tiny sizes, a small byte-level BPE
tokenizer trained here with the `tokenizers` library, and the real checkpoint's special tokens
and chat template (:mod:`.tiny_templates`). Token counts are small (4 to 64 per image) so a
whole test file runs in seconds; the layout of every output is the real model's.

:data:`TINY_FAMILIES` lists what can be built; ``python -m energon_plugin_hf_processor.tiny
FAMILY DIR`` writes one.
"""

from __future__ import annotations

import functools
import json
import pathlib
from collections.abc import Callable
from typing import Any

from energon_plugin_hf_processor import tiny_templates as templates
from energon_plugin_hf_processor.tiny_families import discovered_specs
from energon_plugin_hf_processor.tiny_spec import QWEN2_SPECIAL, TinySpec

_CORPUS = [
    "How many rectangles are there? There are 3 rectangles.",
    "What color is the square? The square is red.",
    "What color is the background? The background is blue.",
    "A red circle on a blue background. Two green triangles on a white background.",
    "Describe the image. Which one is larger? The first one. The second one.",
    "User: Assistant: USER: ASSISTANT: system user assistant model",
    "You are a helpful assistant. Answer the question using a single word or phrase.",
    "The quick brown fox jumps over the lazy dog. 0123456789 !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
]


_LLAMA_SPECIAL = ("<unk>", "<s>", "</s>")
_ROW_COL = tuple(f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6))


def _qwen_vl(processor_cls: str, patch_size: int, video_cls: str) -> Callable[[Any], Any]:
    def build(tokenizer: Any) -> Any:
        import transformers

        image = transformers.Qwen2VLImageProcessor(
            patch_size=patch_size,
            merge_size=2,
            temporal_patch_size=2,
            min_pixels=(2 * patch_size) ** 2,
            max_pixels=(2 * patch_size) ** 2 * 16,
        )
        video = getattr(transformers, video_cls)(
            patch_size=patch_size,
            merge_size=2,
            temporal_patch_size=2,
            size={"shortest_edge": (2 * patch_size) ** 2, "longest_edge": (2 * patch_size) ** 2 * 16},
        )
        return getattr(transformers, processor_cls)(
            image_processor=image,
            tokenizer=tokenizer,
            video_processor=video,
            chat_template=templates.QWEN3_VL if "3" in processor_cls else templates.QWEN2_VL,
        )

    return build


def _llava(tokenizer: Any) -> Any:
    import transformers

    image = transformers.CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    return transformers.LlavaProcessor(
        image_processor=image,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=templates.LLAVA_15,
    )


def _llava_next(tokenizer: Any) -> Any:
    import transformers

    image = transformers.LlavaNextImageProcessor(
        size={"shortest_edge": 28},
        crop_size={"height": 28, "width": 28},
        image_grid_pinpoints=[[28, 56], [56, 28], [56, 56]],
    )
    return transformers.LlavaNextProcessor(
        image_processor=image,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=templates.LLAVA_NEXT_MISTRAL,
    )


def _llava_onevision(tokenizer: Any) -> Any:
    import transformers

    image = transformers.LlavaOnevisionImageProcessor(
        size={"height": 28, "width": 28},
        image_grid_pinpoints=[[28, 56], [56, 28], [56, 56]],
    )
    video = transformers.LlavaOnevisionVideoProcessor(size={"height": 28, "width": 28})
    return transformers.LlavaOnevisionProcessor(
        image_processor=image,
        tokenizer=tokenizer,
        video_processor=video,
        num_image_tokens=4,
        vision_feature_select_strategy="full",
        chat_template=templates.LLAVA_ONEVISION,
    )


def _idefics3(tokenizer: Any) -> Any:
    import transformers

    image = transformers.Idefics3ImageProcessor(
        size={"longest_edge": 56},
        max_image_size={"longest_edge": 28},
        do_image_splitting=True,
    )
    return transformers.Idefics3Processor(
        image_processor=image,
        tokenizer=tokenizer,
        image_seq_len=1,
        chat_template=templates.IDEFICS3,
    )


def _smolvlm(tokenizer: Any) -> Any:
    import transformers

    image = transformers.SmolVLMImageProcessor(
        size={"longest_edge": 56},
        max_image_size={"longest_edge": 28},
        do_image_splitting=True,
    )
    video = transformers.SmolVLMVideoProcessor(
        size={"longest_edge": 28},
        max_image_size={"longest_edge": 28},
    )
    return transformers.SmolVLMProcessor(
        image_processor=image,
        tokenizer=tokenizer,
        video_processor=video,
        image_seq_len=1,
        chat_template=templates.SMOLVLM,
    )


def _gemma3(tokenizer: Any) -> Any:
    import transformers

    image = transformers.Gemma3ImageProcessor(size={"height": 28, "width": 28})
    return transformers.Gemma3Processor(
        image_processor=image,
        tokenizer=tokenizer,
        image_seq_length=4,
        chat_template=templates.GEMMA3,
    )


def _internvl(tokenizer: Any) -> Any:
    import transformers

    image = transformers.GotOcr2ImageProcessor(
        size={"height": 28, "width": 28},
        crop_to_patches=True,
        min_patches=1,
        max_patches=4,
    )
    video = transformers.InternVLVideoProcessor(size={"height": 28, "width": 28})
    return transformers.InternVLProcessor(
        image_processor=image,
        tokenizer=tokenizer,
        video_processor=video,
        image_seq_length=1,
        chat_template=templates.INTERNVL,
    )


TINY_SPECS: dict[str, TinySpec] = {
    spec.name: spec
    for spec in (
        TinySpec(
            "qwen2-vl",
            QWEN2_SPECIAL,
            _qwen_vl("Qwen2VLProcessor", 14, "Qwen2VLVideoProcessor"),
            "Qwen/Qwen2-VL-7B-Instruct",
            pad="<|endoftext|>",
            eos="<|im_end|>",
            end_of_turn="<|im_end|>",
            media=("image", "video"),
        ),
        TinySpec(
            "qwen2.5-vl",
            QWEN2_SPECIAL,
            _qwen_vl("Qwen2_5_VLProcessor", 14, "Qwen2VLVideoProcessor"),
            "Qwen/Qwen2.5-VL-7B-Instruct",
            pad="<|endoftext|>",
            eos="<|im_end|>",
            end_of_turn="<|im_end|>",
            media=("image", "video"),
        ),
        TinySpec(
            "qwen3-vl",
            QWEN2_SPECIAL,
            _qwen_vl("Qwen3VLProcessor", 16, "Qwen3VLVideoProcessor"),
            "Qwen/Qwen3-VL-8B-Instruct",
            pad="<|endoftext|>",
            eos="<|im_end|>",
            end_of_turn="<|im_end|>",
            media=("image", "video"),
        ),
        TinySpec(
            "llava",
            (*_LLAMA_SPECIAL, "<image>", "<pad>"),
            _llava,
            "llava-hf/llava-1.5-7b-hf",
            pad="<pad>",
            bos="<s>",
            eos="</s>",
            unk="<unk>",
            extra={"image_token": "<image>"},
            end_of_turn="",
        ),
        TinySpec(
            "llava-next",
            (*_LLAMA_SPECIAL, "<image>", "<pad>"),
            _llava_next,
            "llava-hf/llava-v1.6-mistral-7b-hf",
            pad="<pad>",
            bos="<s>",
            eos="</s>",
            unk="<unk>",
            extra={"image_token": "<image>"},
            end_of_turn="</s>",
        ),
        TinySpec(
            "llava-onevision",
            (*QWEN2_SPECIAL[:3], "<image>", "<video>"),
            _llava_onevision,
            "llava-hf/llava-onevision-qwen2-0.5b-ov-hf",
            pad="<|endoftext|>",
            eos="<|im_end|>",
            extra={"image_token": "<image>", "video_token": "<video>"},
            end_of_turn="<|im_end|>",
            media=("image", "video"),
        ),
        TinySpec(
            "idefics3",
            (
                "<|begin_of_text|>",
                "<|end_of_text|>",
                "<fake_token_around_image>",
                "<image>",
                "<end_of_utterance>",
                "<global-img>",
                *_ROW_COL,
            ),
            _idefics3,
            "HuggingFaceM4/Idefics3-8B-Llama3",
            pad="<|end_of_text|>",
            bos="<|begin_of_text|>",
            eos="<end_of_utterance>",
            end_of_turn="<end_of_utterance>",
        ),
        TinySpec(
            "smolvlm",
            (
                "<|endoftext|>",
                "<|im_start|>",
                "<fake_token_around_image>",
                "<image>",
                "<end_of_utterance>",
                "<global-img>",
                *_ROW_COL,
            ),
            _smolvlm,
            "HuggingFaceTB/SmolVLM-Instruct",
            pad="<|endoftext|>",
            bos="<|im_start|>",
            eos="<end_of_utterance>",
            end_of_turn="<end_of_utterance>",
            media=("image", "video"),
        ),
        TinySpec(
            "gemma3",
            (
                "<pad>",
                "<eos>",
                "<bos>",
                "<unk>",
                "<start_of_turn>",
                "<end_of_turn>",
                "<start_of_image>",
                "<end_of_image>",
                "<image_soft_token>",
            ),
            _gemma3,
            "google/gemma-3-4b-it",
            pad="<pad>",
            bos="<bos>",
            eos="<eos>",
            unk="<unk>",
            extra={
                "image_token": "<image_soft_token>",
                "boi_token": "<start_of_image>",
                "eoi_token": "<end_of_image>",
            },
            end_of_turn="<end_of_turn>",
        ),
        TinySpec(
            "internvl",
            (*QWEN2_SPECIAL[:3], "<img>", "</img>", "<IMG_CONTEXT>", "<video>"),
            _internvl,
            "OpenGVLab/InternVL3-1B-hf",
            pad="<|endoftext|>",
            eos="<|im_end|>",
            extra={
                "start_image_token": "<img>",
                "end_image_token": "</img>",
                "context_image_token": "<IMG_CONTEXT>",
                "video_token": "<video>",
            },
            end_of_turn="<|im_end|>",
            media=("image", "video"),
        ),
    )
}
for _spec in discovered_specs():
    if _spec.name in TINY_SPECS:
        raise ValueError(f"tiny_families: family {_spec.name!r} is defined twice")
    TINY_SPECS[_spec.name] = _spec

TINY_FAMILIES: tuple[str, ...] = tuple(TINY_SPECS)


@functools.cache
def _trained_tokenizer(special: tuple[str, ...]) -> str:
    """A byte-level BPE trained on a small corpus, with ``special`` as its first ids (JSON)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=list(special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS, trainer=trainer)
    return tokenizer.to_str()


def build_tiny_tokenizer(family: str) -> Any:
    """The tokenizer of :func:`build_tiny_processor` for ``family`` (fresh on every call)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = _spec(family)
    named = {spec.pad, spec.bos, spec.eos, spec.unk}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained_tokenizer(spec.special)),
        pad_token=spec.pad,
        bos_token=spec.bos,
        eos_token=spec.eos,
        unk_token=spec.unk,
        additional_special_tokens=[t for t in spec.special if t not in named],
        extra_special_tokens=dict(spec.extra),
        clean_up_tokenization_spaces=False,
        model_max_length=1_000_000,
    )


def build_tiny_processor(family: str) -> Any:
    """The tiny processor of ``family`` (one of :data:`TINY_FAMILIES`), built in memory."""
    return _spec(family).build(build_tiny_tokenizer(family))


def save_tiny_processor(family: str, directory: Any) -> pathlib.Path:
    """Write the tiny processor of ``family`` to ``directory`` (``AutoProcessor`` loads it).

    Returns the directory. A ``tiny_processor.json`` next to the processor files names the
    family and the checkpoint whose template and special tokens it copies.
    """
    path = pathlib.Path(directory).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    build_tiny_processor(family).save_pretrained(str(path))
    spec = _spec(family)
    (path / "tiny_processor.json").write_text(json.dumps({"family": family, "model_id": spec.model_id}))
    return path


def _spec(family: str) -> TinySpec:
    try:
        return TINY_SPECS[family]
    except KeyError:
        raise ValueError(
            f"family: no tiny processor for {family!r}; expected one of {', '.join(TINY_FAMILIES)}"
        ) from None


def main(argv: list[str] | None = None) -> None:
    """``python -m energon_plugin_hf_processor.tiny FAMILY DIR``."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=TINY_FAMILIES)
    parser.add_argument("directory")
    args = parser.parse_args(argv)
    print(save_tiny_processor(args.family, args.directory))


if __name__ == "__main__":
    main()
