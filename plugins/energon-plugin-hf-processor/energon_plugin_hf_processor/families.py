"""The per-family table: how each processor's outputs become sample fields and combine.

A :class:`FamilySpec` says, for the processor classes of one model family, which output is
the image grid, which further outputs are per-image or per-video vision inputs (``visual``:
``pixel_values_videos``, ``video_grid_thw``, ``second_per_grid_ts``...) and how the samples'
tensors of each key combine when packing and batching, which outputs are per-token
(``token_fields``), and which tokens hold image and video embeddings (to count a medium's
tokens).
:func:`family_for` picks the spec of a processor by its class name (its own class first, then
its base classes); a processor in no family gets :data:`GENERIC`, which guesses the same
from the output shapes.

Add a family with :func:`register_family` (in your code), or from a distribution through the
``energon_plugins.hf_processor_families`` entry-point group (``name = "pkg.module:SPEC"``, a
``FamilySpec`` or a list of them), loaded the first time a processor is looked up. Combine
rules are named (:data:`COMBINE`; :func:`register_combine` adds one).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from energon_plugins import concatenated

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "energon_plugins.hf_processor_families"

Combine = Callable[[list[Any]], Any]


def concat(parts: list[Any]) -> Any:
    """One entry per image (or patch) along dim 0: concatenate (Qwen patches, image sizes).

    Every rule writes into the core's output memory
    (:func:`~energon_plugins.encoding.memory.outputs.concatenated`: shared memory
    in a loader worker, reused arrays elsewhere)."""
    return concatenated(parts, dim=0)


def _padded(parts: list[Any], first_dim: int) -> list[Any]:
    """Zero-pad every dim from ``first_dim`` on to the largest size among ``parts``."""
    import torch.nn.functional as F

    target = [max(int(p.shape[d]) for p in parts) for d in range(first_dim, parts[0].dim())]
    out = []
    for part in parts:
        pad: list[int] = []
        for d in reversed(range(first_dim, part.dim())):
            pad += [0, target[d - first_dim] - int(part.shape[d])]
        out.append(F.pad(part, pad) if any(pad) else part)
    return out


def pad_concat(parts: list[Any]) -> Any:
    """One entry per image along dim 0, the other dims zero-padded to the largest first.

    What a processor does within one call: LLaVA-NeXT / OneVision pad each image's tiles to
    the largest tile count, Pixtral pads images to the largest height and width.
    """
    if len({p.shape[1:] for p in parts}) == 1:
        return concatenated(parts, dim=0)
    return concatenated(_padded(parts, 1), dim=0)


def image_row(parts: list[Any]) -> Any:
    """``(1, n, ...)``: all images of the batch in one row (Idefics3 / SmolVLM sub-images).

    The model flattens ``(B, n)`` and fills the image tokens of the whole batch in order, so
    one row of every image is what it reads, without the all-zero padding images that a
    ``(B, max n)`` layout adds.
    """
    if len({p.shape[2:] for p in parts}) != 1:
        parts = _padded(parts, 2)
    return concatenated(parts, dim=1)


COMBINE: dict[str, Combine] = {"concat": concat, "pad_concat": pad_concat, "image_row": image_row}
"""Named combine rules of :attr:`FamilySpec.visual` and :attr:`FamilySpec.pixel_values`."""


def register_combine(name: str, combine: Combine) -> None:
    """Name a combine rule (``combine(parts) -> tensor``) that family specs can use."""
    if name in COMBINE and COMBINE[name] is not combine:
        raise ValueError(f"combine rule {name!r} is already registered")
    COMBINE[name] = combine


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    """How one family's processor outputs become :class:`~energon_plugins.EncodedSample` fields.

    Attributes:
        name: the family name (shown by ``preview`` and in errors).
        processors: processor class names this spec serves (``Qwen2VLProcessor``, ...).
        pixel_values: combine rule of ``pixel_values`` (a :data:`COMBINE` name).
        grid: the output that becomes ``EncodedSample.image_grid_thw`` (``image_grid_thw``),
            or ``None``.
        visual: further outputs kept as ``EncodedSample.visual`` entries, each with its
            combine rule (``{"image_sizes": "concat"}``). Keys are the model ``forward``'s
            keyword arguments.
        token_fields: per-token outputs ``(1, L)`` kept as ``EncodedSample.token_fields``
            (``token_type_ids`` of Gemma 3, ``mm_token_type_ids`` of Qwen).
        embedding_token: the token whose positions the model fills with image embeddings,
            as an attribute of the processor or of its tokenizer (``image_token``); an
            image's token count is the number of these in its expanded placeholder.
        video_embedding_token: likewise for videos (``video_token``; InternVL and SmolVLM
            fill their ``image_token`` with video frames).
        pixel_budget: the image (and video) processor takes ``min_pixels`` / ``max_pixels``
            (as its ``size`` edges).
        fixed_video_frames: the model takes the videos of a batch as one ``(videos, frames,
            C, H, W)`` tensor, so every video needs the same frame count (``video.num_frames``;
            LLaVA-OneVision); the budget cannot trade frames.
        video_with_images: the processor takes images and videos in one call (SmolVLM's
            cannot: its videos and images share ``pixel_values``).
        drop: outputs the model does not take (left out of the sample).
        default_combine: the combine rule of keys the spec does not name.
    """

    name: str
    processors: tuple[str, ...]
    pixel_values: str = "concat"
    grid: str | None = None
    visual: dict[str, str] = dataclasses.field(default_factory=dict)
    token_fields: tuple[str, ...] = ()
    embedding_token: str = "image_token"
    video_embedding_token: str = "video_token"
    pixel_budget: bool = False
    fixed_video_frames: bool = False
    video_with_images: bool = True
    drop: tuple[str, ...] = ()
    default_combine: str = "concat"

    def __post_init__(self) -> None:
        rules = {"pixel_values": self.pixel_values, "(default)": self.default_combine, **self.visual}
        for key, rule in rules.items():
            if rule not in COMBINE:
                raise ValueError(
                    f"family {self.name!r}: {key} has combine rule {rule!r}; known rules: "
                    f"{', '.join(sorted(COMBINE))} (add one with register_combine)"
                )

    def combine(self, key: str) -> Combine:
        """The combine function of output ``key`` (:attr:`default_combine` for keys it does not name)."""
        if key == "pixel_values":
            return COMBINE[self.pixel_values]
        return COMBINE[self.visual.get(key, self.default_combine)]


_QWEN_GRID = dict(grid="image_grid_thw", token_fields=("mm_token_type_ids",), pixel_budget=True)
# Qwen's video inputs: (patches, D) pixels and (videos, 3) grids, one entry per video.
_QWEN_VIDEO = {"pixel_values_videos": "concat", "video_grid_thw": "concat"}

BUILTIN_FAMILIES: tuple[FamilySpec, ...] = (
    FamilySpec("qwen2-vl", ("Qwen2VLProcessor", "ColQwen2Processor"), visual=_QWEN_VIDEO, **_QWEN_GRID),
    FamilySpec(
        "qwen2.5-vl",
        ("Qwen2_5_VLProcessor",),
        visual={**_QWEN_VIDEO, "second_per_grid_ts": "concat"},
        **_QWEN_GRID,
    ),
    FamilySpec("qwen3-vl", ("Qwen3VLProcessor",), visual=_QWEN_VIDEO, **_QWEN_GRID),
    FamilySpec("glm-4v", ("Glm4vProcessor", "Glm46VProcessor"), visual=_QWEN_VIDEO, **_QWEN_GRID),
    FamilySpec("llava", ("LlavaProcessor",)),
    FamilySpec(
        "llava-next", ("LlavaNextProcessor",), pixel_values="pad_concat", visual={"image_sizes": "concat"}
    ),
    FamilySpec(
        "llava-onevision",
        ("LlavaOnevisionProcessor",),
        pixel_values="pad_concat",
        visual={"image_sizes": "concat", "batch_num_images": "concat", "pixel_values_videos": "concat"},
        fixed_video_frames=True,
    ),
    FamilySpec(
        "idefics3",
        ("Idefics3Processor",),
        pixel_values="image_row",
        visual={"pixel_attention_mask": "image_row"},
    ),
    FamilySpec(
        "smolvlm",
        ("SmolVLMProcessor",),
        pixel_values="image_row",
        visual={"pixel_attention_mask": "image_row"},
        video_embedding_token="image_token",
        video_with_images=False,
    ),
    FamilySpec(
        "gemma3",
        ("Gemma3Processor",),
        token_fields=("token_type_ids",),
        embedding_token="tokenizer.image_token",
    ),
    FamilySpec("internvl", ("InternVLProcessor",), video_embedding_token="image_token"),
    FamilySpec("pixtral", ("PixtralProcessor",), pixel_values="pad_concat", visual={"image_sizes": "concat"}),
)
"""The families this distribution knows (the README's families table)."""

GENERIC = FamilySpec("generic", (), pixel_values="pad_concat", default_combine="pad_concat")
"""The spec of a processor in no family: see :func:`generic_layout`."""

_lock = threading.Lock()
_by_processor: dict[str, FamilySpec] = {}
_by_name: dict[str, FamilySpec] = {}
_entry_points_loaded = False


def register_family(spec: FamilySpec, *, replace: bool = False) -> FamilySpec:
    """Add ``spec`` to the table (it serves the processor classes it names).

    Raises:
        ValueError: a processor class or the name is already served by another spec (pass
            ``replace=True`` to take it over).
    """
    if not isinstance(spec, FamilySpec):
        raise TypeError(f"register_family expects a FamilySpec, got {type(spec).__name__}")
    with _lock:
        _register(spec, replace=replace)
    return spec


def _register(spec: FamilySpec, *, replace: bool) -> None:
    if not replace:
        other = _by_name.get(spec.name)
        if other is not None and other is not spec:
            raise ValueError(f"family {spec.name!r} is already registered")
        for cls in spec.processors:
            other = _by_processor.get(cls)
            if other is not None and other is not spec:
                raise ValueError(
                    f"processor class {cls} is already served by family {other.name!r} "
                    f"(register {spec.name!r} with replace=True to take it over)"
                )
    _by_name[spec.name] = spec
    for cls in spec.processors:
        _by_processor[cls] = spec


for _spec in BUILTIN_FAMILIES:
    _register(_spec, replace=False)


def _load_entry_points() -> None:
    """Register the specs that distributions declare in :data:`ENTRY_POINT_GROUP` (once)."""
    global _entry_points_loaded
    with _lock:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            value = ep.load()
            specs: Iterable[Any] = value if isinstance(value, (list, tuple)) else [value]
            for spec in specs:
                register_family(spec)
        except Exception as exc:  # noqa: BLE001 - one broken plugin must not stop the others
            logger.error(
                "hf-processor: family entry point %r (%s) failed to load: %s: %s",
                ep.name,
                ep.value,
                type(exc).__name__,
                exc,
            )


def families() -> dict[str, FamilySpec]:
    """Every registered family, by name (entry points included)."""
    _load_entry_points()
    return dict(_by_name)


def family_for(processor: Any, name: str | None = None) -> FamilySpec:
    """The spec of ``processor``: the family ``name`` when given, else by class name.

    The processor's own class is looked up first, then its base classes (a subclass of
    ``Qwen2VLProcessor`` is a Qwen2-VL). :data:`GENERIC` when none matches.

    Raises:
        ValueError: ``name`` is not a registered family.
    """
    _load_entry_points()
    if name is not None:
        try:
            return _by_name[name]
        except KeyError:
            raise ValueError(
                f"family: no family {name!r}; registered: {', '.join(sorted(_by_name))}"
            ) from None
    for cls in type(processor).__mro__:
        spec = _by_processor.get(cls.__name__)
        if spec is not None:
            return spec
    return GENERIC


def generic_layout(outputs: dict[str, Any], num_images: int, length: int, num_videos: int = 0) -> FamilySpec:
    """A spec for an unknown processor, guessed from one call's outputs.

    ``pixel_values`` is padded and concatenated per image; ``image_grid_thw`` is the grid;
    an output of shape ``(1, length)`` is per-token; any other tensor with ``num_images``
    (or ``num_videos``) rows is a per-image (per-video) ``visual`` entry (padded and
    concatenated).
    """
    visual: dict[str, str] = {}
    token_fields: list[str] = []
    grid = None
    for key, value in outputs.items():
        shape = tuple(getattr(value, "shape", ()))
        if key in ("input_ids", "attention_mask", "pixel_values", "offset_mapping"):
            continue
        if key == "image_grid_thw":
            grid = key
        elif shape == (1, length):
            token_fields.append(key)
        elif shape and shape[0] in {n for n in (num_images, num_videos) if n}:
            visual[key] = "pad_concat"
    return dataclasses.replace(
        GENERIC,
        pixel_values="pad_concat",
        grid=grid,
        visual=visual,
        token_fields=tuple(token_fields),
    )
