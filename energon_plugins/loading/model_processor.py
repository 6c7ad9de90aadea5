"""The image processor of the model directory, for a datamodule that is given none.

A model directory (what ``tokenizer.path`` usually names: ``/models/llava-1.5-7b-hf``) holds the
model's image-processor settings in ``preprocessor_config.json``, as transformers'
``AutoProcessor`` reads them. When a datamodule is given no image processor and the tokenizer
was loaded from such a directory, the encoders that need one take it from there: the built-in
``hf`` image processor with ``path`` set to that directory (never with ``trust_remote_code``;
a directory whose processor needs remote code is left alone). Both the datamodule's
constructor and the config layer (``validate``, ``preview``, ``bench``, ``from_config``) go
through :func:`model_processor_directory` and :func:`resolve_image_processor`, so they agree.

:func:`describe_image_processor` names what an image processor does in one line (its
transformers class and output size), for ``validate``.
"""

import json
from pathlib import Path
from typing import Any

from energon_plugins.errors import ConfigError

PROCESSOR_CONFIG = "preprocessor_config.json"
"""The file of a model directory that holds its image-processor settings."""

MODEL_PROCESSOR_NAME = "energon-plugins:hf"
"""The image processor built from a model directory: the core's ``hf`` (AutoImageProcessor)."""


def _model_directory(tokenizer_or_path: Any) -> Path | None:
    """The local directory a tokenizer was loaded from (its ``name_or_path``), or ``path``."""
    raw = tokenizer_or_path
    if not isinstance(raw, (str, Path)):
        raw = getattr(tokenizer_or_path, "name_or_path", None)
    if not isinstance(raw, (str, Path)) or not str(raw).strip():
        return None
    try:
        path = Path(raw).expanduser()
        return path if path.is_dir() else None
    except (OSError, RuntimeError):  # an unreadable path or an unknown ~user: not a directory
        return None


def needs_remote_code(directory: Path) -> bool:
    """Whether ``directory``'s ``preprocessor_config.json`` names its image processor through
    ``auto_map`` (code shipped with the model, which is never run without being asked)."""
    try:
        settings = json.loads((directory / PROCESSOR_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # unreadable: loading it reports why
    auto_map = settings.get("auto_map") if isinstance(settings, dict) else None
    return isinstance(auto_map, dict) and "AutoImageProcessor" in auto_map


def model_processor_directory(tokenizer_or_path: Any) -> Path | None:
    """The model directory whose image processor a run without one uses, or ``None``.

    ``tokenizer_or_path`` is a tokenizer (its ``name_or_path``, where ``from_pretrained``
    loaded it) or a path. The directory must hold ``preprocessor_config.json`` of a processor
    transformers knows (no ``auto_map`` to code in the directory).
    """
    directory = _model_directory(tokenizer_or_path)
    if directory is None or not (directory / PROCESSOR_CONFIG).is_file():
        return None
    if needs_remote_code(directory):
        return None
    return directory.resolve()


def why_no_model_processor(tokenizer_or_path: Any) -> str:
    """Why :func:`model_processor_directory` finds no processor for ``tokenizer_or_path``, in
    words that name ``tokenizer.path`` (for ``validate``'s report of the default it used)."""
    directory = _model_directory(tokenizer_or_path)
    if directory is None:
        return "the tokenizer was not loaded from a local directory"
    if not (directory / PROCESSOR_CONFIG).is_file():
        return f"tokenizer.path holds no {PROCESSOR_CONFIG}"
    if needs_remote_code(directory):
        return (
            f"the {PROCESSOR_CONFIG} of tokenizer.path names code shipped in the directory "
            "(auto_map), which is never run"
        )
    return f"tokenizer.path holds a {PROCESSOR_CONFIG}"


def load_model_image_processor(directory: Path, context: Any = None) -> Any:
    """The built-in ``hf`` image processor with ``path`` = ``directory``.

    Raises:
        ConfigError: naming ``tokenizer.path`` (where the directory came from) and why the
            processor settings do not load.
    """
    from energon_plugins.host.api import create

    try:
        return create("image_processor", MODEL_PROCESSOR_NAME, {"path": str(directory)}, context)
    except Exception as exc:
        text = " ".join(str(exc).split())
        raise ConfigError(
            f"tokenizer.path: the model directory {str(directory)!r} holds a {PROCESSOR_CONFIG} "
            f"that does not load ({text}); fix the file, or name an image processor "
            "(image_processor: {name: ..., options: ...}, or image_processor=... in Python)"
        ) from exc


def resolve_image_processor(image_processor: Any, tokenizer: Any) -> tuple[Any, str | None]:
    """``(processor, source)``: the image processor a datamodule uses, and where it came from.

    A processor given is used (a raw transformers processor wrapped so it takes Energon's
    images); ``source`` is ``"given"``. Without one, the model directory's
    (:func:`model_processor_directory` of ``tokenizer``): ``source`` is
    ``"hf from DIRECTORY"``. Otherwise ``(None, None)``: an encoder that brings its own
    default builds it, the others say they need one.
    """
    if image_processor is not None:
        from energon_plugins.encoding.image_processors.hf import wrap_image_processor

        return wrap_image_processor(image_processor), "given"
    directory = model_processor_directory(tokenizer)
    if directory is None:
        return None, None
    return load_model_image_processor(directory), f"hf from {directory}"


def _own(processor: Any, name: str) -> Any:
    """``processor``'s own attribute ``name`` (not one a wrapper forwards), or ``None``."""
    return getattr(processor, "__dict__", {}).get(name)


def _transformers_processor(processor: Any) -> Any:
    """The transformers processor inside the wrappers (``HFImageProcessor``, ``llava-clip``)."""
    for _ in range(4):  # wrappers nest at most a few deep
        inner = _own(processor, "processor")
        if inner is None:
            inner = _own(processor, "inner")
        if inner is None:
            break
        processor = inner
    return processor


def _size_text(processor: Any) -> str | None:
    def get(size: Any, key: str) -> Any:
        if size is None:
            return None
        return size.get(key) if isinstance(size, dict) else getattr(size, key, None)

    if getattr(processor, "do_center_crop", False):
        crop = getattr(processor, "crop_size", None)
        if get(crop, "height") and get(crop, "width"):
            return f"{get(crop, 'height')}x{get(crop, 'width')}"
    size = getattr(processor, "size", None)
    if get(size, "height") and get(size, "width"):
        return f"{get(size, 'height')}x{get(size, 'width')}"
    low = get(size, "shortest_edge") or getattr(processor, "min_pixels", None)
    high = get(size, "longest_edge") or getattr(processor, "max_pixels", None)
    if getattr(processor, "merge_size", None) and low and high:
        return f"dynamic resolution, {low}-{high} pixels"
    if get(size, "shortest_edge"):
        return f"shortest edge {get(size, 'shortest_edge')}"
    return None


def describe_image_processor(processor: Any) -> str:
    """One line on what ``processor`` makes of an image: ``"CLIPImageProcessor, 336x336"``
    (the crop or fixed size), ``"..., dynamic resolution, 3136-50176 pixels"``, plus
    ``"padded to a square first"`` for LLaVA's padding."""
    if processor is None:
        return "none"
    inner = _transformers_processor(processor)
    parts = [type(inner).__name__]
    size = _size_text(inner)
    if size:
        parts.append(size)
    if _own(processor, "pad") is True:
        parts.append("padded to a square first")
    return ", ".join(parts)
