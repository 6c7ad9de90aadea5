"""Loading the model's processor, and reading from it what the ``hf-processor`` encoder needs.

:func:`load_processor` loads ``AutoProcessor`` offline and checks it is a vision-language
processor with a fast tokenizer. The other functions read, once when the encoder is built, the
special tokens that may close a turn, the id of a token that holds embeddings, the keyword
arguments of every processor call (the pixel budget), what the chat template writes for
one image in running text, and the text the processor puts before every text.
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.families import FamilySpec
from energon_plugin_hf_processor.labels import ChatRenderer
from energon_plugin_hf_processor.options import HFProcessorOptions
from energon_plugins import ConfigError


def load_processor(options: HFProcessorOptions, tokenizer: Any = None) -> Any:
    """``AutoProcessor.from_pretrained(options.processor)``, offline.

    Without ``options.processor``, the directory ``tokenizer`` was loaded from (its
    ``name_or_path``: ``tokenizer.path`` of a config file) is used.

    Raises:
        ConfigError: naming ``task_encoder.options.processor`` and why loading failed.
    """
    import pathlib

    from transformers import AutoProcessor

    source = options.processor or getattr(tokenizer, "name_or_path", None)
    if not source:
        raise ConfigError(
            "task_encoder.options.processor: not set, and the tokenizer names no directory; "
            "give the local directory of the model's processor"
        )
    path = pathlib.Path(source).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"task_encoder.options.processor: {str(source)!r} is not a directory (give "
            "the local directory of the model's processor; nothing is downloaded)"
        )
    try:
        processor = AutoProcessor.from_pretrained(
            str(path), local_files_only=True, trust_remote_code=options.trust_remote_code
        )
    except Exception as exc:
        hint = (
            ""
            if options.trust_remote_code
            else (
                " (a processor outside transformers needs trust_remote_code: true)"
                if "trust_remote_code" in str(exc)
                else ""
            )
        )
        raise ConfigError(
            f"task_encoder.options.processor: AutoProcessor cannot load {str(path)!r}: "
            f"{type(exc).__name__}: {exc}{hint}"
        ) from exc
    media = any(hasattr(processor, a) for a in ("image_processor", "feature_extractor", "audio_processor"))
    if getattr(processor, "tokenizer", None) is None or not media:
        raise ConfigError(
            f"task_encoder.options.processor: {str(path)!r} holds a {type(processor).__name__}, "
            "not a multimodal processor (a tokenizer and an image processor or an audio "
            "feature extractor)"
        )
    if not getattr(processor.tokenizer, "is_fast", False):
        raise ConfigError(
            f"task_encoder.options.processor: the tokenizer in {str(path)!r} is a slow "
            "tokenizer; hf-processor needs a fast one (tokenizer.json) for token offsets"
        )
    return processor


def end_of_turn_tokens(processor: Any) -> list[str]:
    """Special tokens that may close a turn: the tokenizer's, less the multimodal ones."""
    tok = processor.tokenizer
    multimodal = {
        getattr(processor, attr, None) for attr in ("image_token", "video_token", "audio_token", "boi_token")
    } | {getattr(tok, attr, None) for attr in ("image_token", "boi_token", "eoi_token")}
    return [t for t in tok.all_special_tokens if t not in multimodal]


def prepended_chars(processor: Any) -> int:
    """How many characters the processor puts before every text it is given (Janus's
    default system prompt), read from the token offsets of one text-only call; ``0`` when
    it adds none (or cannot be called without media)."""
    probe = "\u27e6"
    try:
        out = processor(text=[probe], return_offsets_mapping=True)
        ends = [int(end) for _, end in out["offset_mapping"][0]]
    except Exception:  # noqa: BLE001 - a processor that needs media: nothing to read
        return 0
    return max(0, max(ends, default=len(probe)) - len(probe))


def processor_call_kwargs(
    processor: Any, family: FamilySpec, options: HFProcessorOptions
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keyword arguments of every processor call, and the extra ``images_kwargs``.

    A Qwen-style processor (``family.pixel_budget``, ``size`` edges) takes the options'
    ``min_pixels`` / ``max_pixels`` as the images' ``size`` (the videos have their own, in the
    ``video`` options); any other processor takes them as its own attributes of those names.

    Raises:
        ConfigError: ``min_pixels`` / ``max_pixels`` for an image processor without them.
    """
    kwargs = dict(options.processor_kwargs)
    image_kwargs: dict[str, Any] = {}
    image_processor = getattr(processor, "image_processor", None)  # None: audio only
    budget = {"shortest_edge": options.min_pixels, "longest_edge": options.max_pixels}
    size = getattr(image_processor, "size", None)
    if family.pixel_budget and getattr(size, "longest_edge", None) is not None:
        if any(v is not None for v in budget.values()):
            image_kwargs["size"] = {k: v if v is not None else getattr(size, k) for k, v in budget.items()}
        return kwargs, image_kwargs
    for name in ("min_pixels", "max_pixels"):
        value = getattr(options, name)
        if value is None:
            continue
        if not hasattr(image_processor, name):
            raise ConfigError(
                f"task_encoder.options.{name}: the {type(image_processor).__name__} "
                f"of {type(processor).__name__} has no {name} (dynamic-resolution "
                "processors such as Qwen2-VL's have); use processor_kwargs for its own size "
                "settings"
            )
        kwargs[name] = value
    return kwargs, image_kwargs


def embedding_token_id(processor: Any, attr: str) -> int | None:
    """The id of the token named by the processor's ``attr`` (``tokenizer.X``: the
    tokenizer's), or ``None`` where it names none."""
    owner: Any = processor
    if attr.startswith("tokenizer."):
        owner, attr = processor.tokenizer, attr.split(".", 1)[1]
    token = getattr(owner, attr, None)
    if token is None:
        return None
    token_id = processor.tokenizer.convert_tokens_to_ids(token)
    return int(token_id) if isinstance(token_id, int) else None


def image_placeholder(processor: Any, renderer: ChatRenderer, image_tag: str) -> str:
    """What the chat template writes for one image in running text (for interleaved samples):
    rendered between two markers, else the processor's bare image token."""
    left, right = "\u27e6", "\u27e7"
    image_token = getattr(processor, "image_token", None) or image_tag
    try:
        text = renderer.render(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": left},
                        {"type": "image"},
                        {"type": "text", "text": right},
                    ],
                }
            ]
        )
    except Exception:  # noqa: BLE001 - templates that need more turns: the bare token
        return image_token
    start, end = text.find(left), text.find(right)
    between = text[start + 1 : end] if 0 <= start < end else ""
    return between if image_token in between else image_token
