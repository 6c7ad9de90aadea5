"""Reading a collated ``MultiModalBatch`` back: segments, decoded text, statistics, and the
layout of the batch a training loop reads (its batch format's keys, shapes and dtypes).

Shared by ``preview`` (what the model sees), ``bench`` (padding and fill ratios) and ``demo``.
Works on any batch with the core's fields; imports torch lazily through the tensors themselves.
"""

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Segment:
    """A run of one row: ``[start, end)`` token positions; ``padding`` for the row's pad tail."""

    start: int
    end: int
    padding: bool
    real: int | None = None
    """Tokens before the sub-sequence's own padding (``pad_to_multiple_of``); None: all."""

    @property
    def length(self) -> int:
        """Tokens in the segment, as laid out."""
        return self.end - self.start

    @property
    def real_length(self) -> int:
        """Tokens of the segment without its per-sub-sequence padding."""
        return self.length if self.real is None else min(self.real, self.length)


def batch_fields(batch: Any) -> dict[str, Any]:
    """The batch's data fields (tensors and values), without Energon's bookkeeping keys."""
    if dataclasses.is_dataclass(batch):
        names = [f.name for f in dataclasses.fields(batch)]
    else:
        names = list(vars(batch))
    return {n: getattr(batch, n) for n in names if not n.startswith("_")}


@dataclasses.dataclass(frozen=True)
class FieldLayout:
    """One entry of a batch as the loop reads it: ``name`` (dotted inside a nested object,
    ``visual_inputs.pixel_values``), its ``shape`` and ``dtype`` (tensors and arrays), else a
    short description of the value (``list[str] of 2``, ``int 640``, ``None``)."""

    name: str
    shape: tuple[int, ...] | None
    dtype: str | None
    value: str = ""

    def describe(self) -> str:
        """``(2, 320) torch.int64`` for a tensor, else :attr:`value`."""
        if self.shape is None:
            return self.value
        return f"{self.shape} {self.dtype}"


def _nested_items(value: Any) -> list[tuple[str, Any]] | None:
    """The entries of a mapping, a dataclass or a plain object (``VisualInputs``), or None for
    a leaf (a tensor, an array, a list, a scalar, None)."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return None
    if isinstance(value, Mapping):
        return [(str(key), item) for key, item in value.items()]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    if hasattr(value, "__dict__") and not isinstance(value, type) and not callable(value):
        return [(key, item) for key, item in vars(value).items() if not key.startswith("_")]
    return None


def _leaf(name: str, value: Any) -> FieldLayout:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return FieldLayout(name, tuple(int(x) for x in value.shape), str(value.dtype))
    if value is None:
        return FieldLayout(name, None, None, "None")
    if isinstance(value, (list, tuple)):
        kinds = sorted({type(item).__name__ for item in value})
        inner = f"[{'|'.join(kinds)}]" if kinds else ""
        return FieldLayout(name, None, None, f"{type(value).__name__}{inner} of {len(value)}")
    if isinstance(value, (bool, int, float, str)):
        return FieldLayout(name, None, None, f"{type(value).__name__} {value!r}")
    return FieldLayout(name, None, None, type(value).__name__)


def batch_layout(batch: Any, *, depth: int = 2) -> list[FieldLayout]:
    """Every entry of ``batch`` (a mapping, a dataclass or an object) with its shape and dtype,
    nested objects (``visual_inputs``, ``packed_seq_params``, ``visual``) opened ``depth`` deep.

    For a core ``MultiModalBatch`` (a dataclass) Energon's bookkeeping fields (``__key__``,
    ``__restore_key__``, ...) are left out, as in :func:`batch_fields`; a mapping is shown whole,
    ``__keys__`` included, since that is what the loop receives.
    """
    items = _nested_items(batch)
    if items is None:
        return [_leaf("batch", batch)]
    if dataclasses.is_dataclass(batch):
        items = [(name, value) for name, value in items if not name.startswith("_")]
    return _layout(items, "", depth)


def _layout(items: list[tuple[str, Any]], prefix: str, depth: int) -> list[FieldLayout]:
    out: list[FieldLayout] = []
    for name, value in items:
        nested = _nested_items(value) if depth > 1 else None
        if nested:
            out.extend(_layout(nested, f"{prefix}{name}.", depth - 1))
        elif nested is not None:  # an empty mapping or object
            out.append(FieldLayout(prefix + name, None, None, f"{type(value).__name__} (empty)"))
        else:
            out.append(_leaf(prefix + name, value))
    return out


def layout_text(fields: list[FieldLayout]) -> str:
    """The layout in one line: ``tokens (2, 320) torch.int64, ...``."""
    return ", ".join(f"{field.name} {field.describe()}" for field in fields)


def loop_batch_format(datamodule: Any, selection: Any) -> tuple[Callable[[Any], Any] | None, str]:
    """``(fmt, label)``: the batch format ``selection`` (a name, ``{name, options}``, a callable
    or None) built as the datamodule's loader builds it, for its training split; ``fmt(batch)``
    turns the task encoder's batch into what the loop reads, and a failure raises the
    loader's ``BatchFormatError`` naming the format and the task encoder. ``(None, "")`` for
    None."""
    from energon_plugins.loading.formatting import build_batch_format

    fmt, label = build_batch_format(selection, datamodule.build_context("train"))
    if fmt is None:
        return None, ""
    from energon_plugins.errors import BatchFormatError

    encoder = type(datamodule.task_encoder).__name__

    def apply(batch: Any) -> Any:
        # as the loader's BatchFormatDataset.apply reports a failing format
        try:
            return fmt(batch)
        except BatchFormatError as exc:
            raise BatchFormatError(f"{exc} (from task encoder {encoder})") from exc
        except Exception as exc:
            raise BatchFormatError(
                f"{label} failed on a batch of task encoder {encoder} "
                f"({type(batch).__name__}): {type(exc).__name__}: {exc}"
            ) from exc

    return apply, label


def record_keys(loop_batch: Any, encoder_batch: Any) -> list[str]:
    """The record key of every row: the loop batch's ``__keys__`` when it carries them (the
    Megatron formats; a packed row's keys joined by commas), else the encoder batch's
    ``__key__``."""
    keys = loop_batch.get("__keys__") if isinstance(loop_batch, Mapping) else None
    if keys is None:
        keys = getattr(loop_batch, "__keys__", None)
    if keys is None:
        keys = getattr(encoder_batch, "__key__", None)
    if keys is None:
        return []
    if isinstance(keys, str):
        return [keys]
    return [str(key) for key in keys]


def row_segments(batch: Any, row: int, pad_id: int | None, ignore_index: int) -> list[Segment]:
    """The sub-sequences of ``row`` in order, its padding tail (if any) marked ``padding``."""
    input_ids = batch.input_ids
    width = int(input_ids.shape[1])
    params = getattr(batch, "packed_seq_params", None)
    if params is not None:
        real_cu = [int(x) for x in params.cu_seqlens_q.tolist()]
        padded = getattr(params, "cu_seqlens_q_padded", None)
        cu = [int(x) for x in padded.tolist()] if padded is not None else real_cu
        reals = [b - a for a, b in zip(real_cu, real_cu[1:])]
        lo, hi = row * width, (row + 1) * width
        segments = [
            Segment(a - lo, b - lo, False, reals[i] if i < len(reals) else None)
            for i, (a, b) in enumerate(zip(cu, cu[1:]))
            if a >= lo and b <= hi
        ]
        if segments:
            tail = segments[-1]
            ids = input_ids[row, tail.start : tail.end]
            labels = batch.labels[row, tail.start : tail.end]
            if (
                (pad_id is None or bool((ids == pad_id).all()))
                and bool((labels == ignore_index).all())
                and len(segments) > 1
            ):
                segments[-1] = Segment(tail.start, tail.end, True)
        return segments
    mask = getattr(batch, "attention_mask", None)
    real = int(mask[row].sum()) if mask is not None else width
    segments = [Segment(0, real, False)]
    if real < width:
        segments.append(Segment(real, width, True))
    return segments


def image_token_id(tokenizer: Any, sample_config: Any) -> int | None:
    """The image placeholder's id: the sample config's, else the tokenizer's for its token."""
    if getattr(sample_config, "image_token_id", None) is not None:
        return int(sample_config.image_token_id)
    token = getattr(sample_config, "image_token", "<image>")
    try:
        value = tokenizer.convert_tokens_to_ids(token)
    except Exception:  # noqa: BLE001 - a tokenizer without the token
        return None
    unk = getattr(tokenizer, "unk_token_id", None)
    return None if value is None or (unk is not None and value == unk) else int(value)


@dataclasses.dataclass(frozen=True)
class Span:
    """A run of tokens rendered together: text, or a collapsed image run, with loss flag."""

    text: str
    kind: str
    """``text``, ``image`` (collapsed image tokens), ``video`` (collapsed video tokens), ``audio``
    (collapsed audio tokens) or ``pad``."""
    loss: bool
    count: int


def collapsed_image_text(token: str, count: int) -> str:
    """``<image x576>`` for ``count`` image tokens ``<image>``; ``[<|image_pad|> x64]`` otherwise."""
    match = re.fullmatch(r"<([\w.-]+)>", token)
    if match:
        return f"<{match.group(1)} x{count}>"
    return f"[{token} x{count}]"


def encoder_video_token_id(datamodule: Any) -> int | None:
    """The video placeholder's id as the training encoder expands it (``video_token_id``), or
    ``None`` for an encoder without videos."""
    value = getattr(datamodule.task_encoder, "video_token_id", None)
    return value if isinstance(value, int) else None


def encoder_token_ids(datamodule: Any) -> tuple[int | None, int, int | None]:
    """``(image_token_id, ignore_index, pad_id)`` as the training encoder uses them.

    Taken from the encoder when it exposes them (a plugin may expand another image token than
    the sample config's), else from the sample config and the tokenizer.
    """
    sample_config = datamodule.multimodal_sample_config
    tokenizer = datamodule.tokenizer
    encoder = datamodule.task_encoder
    image_id = getattr(encoder, "image_token_id", None)
    if not isinstance(image_id, int):
        image_id = image_token_id(tokenizer, sample_config)
    ignore = getattr(encoder, "ignore_index", None)
    if not isinstance(ignore, int):
        ignore = sample_config.ignore_index
    pad_id = getattr(encoder, "pad_token_id", None)
    if not isinstance(pad_id, int):
        pad_id = getattr(tokenizer, "pad_token_id", None)
    return image_id, ignore, pad_id


def render_spans(
    tokenizer: Any,
    ids: list[int],
    labels: list[int],
    ignore_index: int,
    image_id: int | None,
    video_id: int | None = None,
    audio_id: int | None = None,
) -> list[Span]:
    """Group tokens into runs of (text, image, video or audio, loss or not) and decode each
    text run."""
    media = {
        token: kind
        for token, kind in ((audio_id, "audio"), (video_id, "video"), (image_id, "image"))
        if token is not None
    }
    spans: list[Span] = []
    start = 0
    n = len(ids)
    while start < n:
        kind = media.get(ids[start], "text")
        loss = labels[start] != ignore_index
        end = start + 1
        while end < n and media.get(ids[end], "text") == kind and (labels[end] != ignore_index) == loss:
            end += 1
        if kind != "text":
            token = getattr(tokenizer, "convert_ids_to_tokens", lambda i: f"<{kind}>")(ids[start])
            spans.append(Span(collapsed_image_text(str(token), end - start), kind, loss, end - start))
        else:
            text = tokenizer.decode(ids[start:end], skip_special_tokens=False)
            spans.append(Span(text, "text", loss, end - start))
        start = end
    return spans


def video_spans(ids: list[int], video_id: int | None, counts: list[int]) -> list[tuple[int, int]]:
    """``(first, last + 1)`` positions of each video's tokens in ``ids``, in order.

    A video's tokens may lie in several runs (Qwen3-VL writes a time stamp before each
    frame's); ``counts`` (its ``video_token_counts``) says how many belong to each video.
    """
    if video_id is None:
        return []
    positions = [i for i, token in enumerate(ids) if token == video_id]
    spans, offset = [], 0
    for count in counts:
        if count <= 0 or offset + count > len(positions):
            break
        spans.append((positions[offset], positions[offset + count - 1] + 1))
        offset += count
    return spans


@dataclasses.dataclass
class BatchStats:
    """Token accounting of one or more batches."""

    rows: int = 0
    samples: int = 0
    real_tokens: int = 0
    total_tokens: int = 0
    loss_tokens: int = 0
    capacity_tokens: int = 0

    @property
    def padding_fraction(self) -> float:
        """Padding tokens / all tokens of the padded batches."""
        return 1.0 - self.real_tokens / self.total_tokens if self.total_tokens else 0.0

    @property
    def fill_ratio(self) -> float:
        """Real tokens / (rows x seq_length): how full the packed sequences are."""
        return self.real_tokens / self.capacity_tokens if self.capacity_tokens else 0.0

    def add(self, other: "BatchStats") -> None:
        """Accumulate ``other`` into this."""
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


def batch_stats(batch: Any, pad_id: int | None, ignore_index: int, seq_length: int) -> BatchStats:
    """Count rows, samples (sub-sequences), real, padded and loss tokens of ``batch``."""
    rows, width = (int(x) for x in batch.input_ids.shape[:2])
    stats = BatchStats(rows=rows, total_tokens=rows * width, capacity_tokens=rows * seq_length)
    stats.loss_tokens = int((batch.loss_mask > 0).sum())
    for row in range(rows):
        for segment in row_segments(batch, row, pad_id, ignore_index):
            if not segment.padding:
                stats.samples += 1
                stats.real_tokens += segment.real_length
    return stats
