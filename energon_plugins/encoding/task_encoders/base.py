"""``PluginTaskEncoder``: the Energon task encoder that plugin authors subclass.

A subclass implements ``encode_sample(sample) -> EncodedSample``; the base gives it

- an explicit error policy (``on_error="skip"`` counts failures by reason and skips the
  sample quietly; ``"raise"`` stops the loader with the sample named),
- ``batch``: padding, position ids, attention mask, image concatenation, and packed
  sub-sequences (several ``seq_lengths``) turned into megatron-core ``PackedSeqParams``,
- sequence packing with the selected strategy (``select_samples_to_pack``,
  ``pack_selected_samples``, carry-over in ``build_batch``), from
  :class:`~energon_plugins.encoding.task_encoders.packing.PackingMixin`;
- Energon's decoder chosen for the image processor: a processor that declares
  ``image_input`` (``"bytes"``, ``"uint8"``, ``"pil"``) gets its images in that form
  (:mod:`energon_plugins.encoding.image_processors.inputs`); one that declares nothing gets
  Energon's default float decode, as before;
- checks of what its plugins return, where it first appears
  (:mod:`~energon_plugins.encoding.task_encoders.output_checks`): ``encode_sample``'s result,
  the image processor's output; a broken one stops the loader, naming the plugin;
- deferred work: in the loader, ``encode_sample`` may return a sample whose images are not
  processed yet (its lengths known from the image headers);
  :meth:`PluginTaskEncoder.complete_samples` finishes the samples of a pack (after the packing
  stage chose it) or of a batch together, so their pixels land in one tensor without a copy.

Everything runs downstream of Energon's shuffle buffer, so every stage is ``@stateless``:
``encode_sample`` must be a pure function of the sample (use
``@stateless(restore_seeds=True)`` from ``megatron.energon`` if it draws random numbers).
"""

import collections
import functools
import inspect
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

import torch
from megatron.energon import DefaultTaskEncoder, SkipSample, stateless
from megatron.energon.errors import FatalSampleError
from megatron.energon.task_encoder.base import TaskEncoder

from energon_plugins.encoding.chat.aux_media import resolve_lazy_media
from energon_plugins.encoding.image_processors.inputs import decoder_for
from energon_plugins.encoding.memory.outputs import concatenated
from energon_plugins.encoding.packed_seq import packed_seq_params
from energon_plugins.encoding.plugin_outputs import FatalPluginOutputError
from energon_plugins.encoding.sample_config import MultiModalSampleConfig
from energon_plugins.encoding.samples import EncodedSample, MultiModalBatch
from energon_plugins.encoding.skips import CountedSkip
from energon_plugins.encoding.task_encoders.output_checks import OutputChecksMixin
from energon_plugins.encoding.task_encoders.packing import PackingMixin
from energon_plugins.errors import PluginOutputError
from energon_plugins.host.context import BuildContext

T_sample = TypeVar("T_sample")

#: Consecutive skipped samples after which the encoder gives up (the data is likely broken).
DEFAULT_MAX_CONSECUTIVE_ERRORS = 100


def _sample_key(sample: Any) -> str:
    key = getattr(sample, "__key__", None)
    if key is None and isinstance(sample, dict):  # a crude sample, before cooking
        key = sample.get("__key__")
    return str(key or "<unknown key>")


def _wrap_encode_sample(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a subclass's ``encode_sample`` with the error policy, keeping Energon's markers.

    A subclass's wrapped ``encode_sample`` that calls its parent's (wrapped too) counts one
    sample: only the outermost call resets the consecutive-error count, so a sample that fails
    after ``super().encode_sample`` succeeded still counts towards ``max_consecutive_errors``.
    """

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen_wrapper(self: "PluginTaskEncoder", sample: Any):
            depth = self.__dict__.get("_encode_depth", 0)
            self._encode_depth = depth + 1
            try:
                sample = resolve_lazy_media(sample)  # aux media held as Energon Lazy handles
                for encoded in fn(self, sample):
                    if not depth:
                        self.check_encoded_sample(sample, encoded)
                    yield encoded
            except Exception as exc:  # noqa: BLE001 - the policy decides
                self.handle_error(exc, sample)
            else:
                if not depth:
                    self._consecutive_errors = 0
            finally:
                self._encode_depth = depth

        wrapper = gen_wrapper
    else:

        @functools.wraps(fn)
        def wrapper(self: "PluginTaskEncoder", sample: Any):
            depth = self.__dict__.get("_encode_depth", 0)
            self._encode_depth = depth + 1
            try:
                sample = resolve_lazy_media(sample)  # aux media held as Energon Lazy handles
                result = fn(self, sample)
            except Exception as exc:  # noqa: BLE001 - the policy decides
                self.handle_error(exc, sample)
            finally:
                self._encode_depth = depth
            if not depth:
                self._consecutive_errors = 0
                self.check_encoded_sample(sample, result)  # a plugin bug stops the loader
            return result

    # A PluginTaskEncoder's encode_sample is a pure function of the sample: mark it stateless
    # (functools.wraps copied __stateless__ / __failure_tolerance__ / the seed wrapper already).
    wrapper.__stateless__ = True  # type: ignore[attr-defined]
    wrapper.__plugin_error_policy__ = True  # type: ignore[attr-defined]
    return wrapper


class PluginTaskEncoder(
    OutputChecksMixin,
    PackingMixin,
    DefaultTaskEncoder[T_sample, EncodedSample, MultiModalBatch, MultiModalBatch],
    Generic[T_sample],
):
    """Base class of task encoders built by energon-plugins factories.

    Args:
        context: the :class:`~energon_plugins.BuildContext` (tokenizer, image processor,
            sample config, sequence length, packing strategy, split).
        on_error: ``"skip"`` (count the failure by exception type and skip the sample) or
            ``"raise"`` (stop with an error naming the sample).
        padding: ``"seq_length"`` pads every batch to ``context.seq_length`` (fixed shapes,
            what Megatron expects), ``"longest"`` to the longest row of the batch.
        max_consecutive_errors: after this many skipped samples in a row, fail (0: never).

    Attributes:
        context, tokenizer, image_processor, sample_config, seq_length, packing.

    Error counts (:meth:`error_counts`) live in the process that encodes: with
    ``num_workers > 0`` each worker process holds its own counts.

    Class attribute ``supported_sample_types``: the Energon sample types ``encode_sample``
    reads (cooked crude samples aside). When set, a dataset of another type is refused before
    any loader starts, with a message naming both; ``None`` (the default) skips the check.
    """

    supported_sample_types: tuple[type, ...] | None = None

    def __init__(
        self,
        context: BuildContext | None = None,
        *,
        on_error: Literal["skip", "raise"] = "skip",
        padding: Literal["seq_length", "longest"] = "seq_length",
        max_consecutive_errors: int = DEFAULT_MAX_CONSECUTIVE_ERRORS,
    ) -> None:
        super().__init__()
        if on_error not in ("skip", "raise"):
            raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
        if padding not in ("seq_length", "longest"):
            raise ValueError(f"padding must be 'seq_length' or 'longest', got {padding!r}")
        self.context = context if context is not None else BuildContext()
        self.tokenizer = self.context.tokenizer
        self.image_processor = self.context.image_processor
        self.sample_config: MultiModalSampleConfig = (
            self.context.sample_config if self.context.sample_config is not None else MultiModalSampleConfig()
        )
        self.seq_length = int(self.context.seq_length)
        self.packing = self.context.packing
        self.on_error = on_error
        self.padding = padding
        self.max_consecutive_errors = max_consecutive_errors
        self._error_counts: collections.Counter[str] = collections.Counter()
        self._consecutive_errors = 0
        # Decode images as the processor wants them, unless the subclass set its own decoder.
        decoder = decoder_for(self.image_processor)
        if decoder is not None and getattr(type(self), "decoder", None) is TaskEncoder.decoder:
            self.decoder = decoder

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fn = cls.__dict__.get("encode_sample")
        if fn is not None and not getattr(fn, "__plugin_error_policy__", False):
            cls.encode_sample = _wrap_encode_sample(fn)

    def preflight_problems(self) -> list[str]:
        """Problems this encoder can find without reading data (``energon-plugins validate``
        reports them), each message starting with the config key it concerns
        (``seq_length: ...``). The default finds none."""
        return []

    # ------------------------------------------------------------------ error policy
    @property
    def ignore_index(self) -> int:
        """The label value the loss ignores (from the sample config)."""
        return self.sample_config.ignore_index

    @property
    def pad_token_id(self) -> int:
        """The id used to pad ``input_ids``: the tokenizer's pad, else its eos, else 0."""
        tok = self.tokenizer
        for attr in ("pad_token_id", "eos_token_id"):
            value = getattr(tok, attr, None) if tok is not None else None
            if isinstance(value, int):
                return value
        return 0

    def error_counts(self) -> dict[str, int]:
        """Samples skipped so far in this process, by reason (exception type or skip reason)."""
        return dict(self._error_counts)

    def handle_error(self, exc: Exception, sample: Any) -> None:
        """Apply the error policy to ``exc`` raised while cooking or encoding ``sample``.

        Always raises: ``SkipSample`` (counted by reason) under ``on_error="skip"``, else
        ``FatalSampleError`` naming the sample. A
        :class:`~energon_plugins.errors.PluginOutputError` (a plugin's output broke its
        contract) is never skipped: it stops the loader under either policy.

        Skips of every kind (failures under ``on_error="skip"``, :class:`CountedSkip`, a
        plain ``SkipSample``) count towards ``max_consecutive_errors``, so a dataset whose
        every sample is skipped fails loudly instead of spinning forever.
        """
        if isinstance(exc, FatalSampleError) or getattr(exc, "_counted_by", None) is self:
            raise exc  # fatal, or already counted by a wrapped super().encode_sample
        if isinstance(exc, PluginOutputError):  # a plugin bug, not a bad sample: stop
            raise FatalPluginOutputError(str(exc)) from exc
        if isinstance(exc, CountedSkip) and not exc.deliberate and self.on_error == "raise":
            raise FatalSampleError(
                f"{type(self).__name__} cannot use sample {_sample_key(sample)!r} "
                f"({exc.reason}): {exc} (on_error='raise'; 'skip' skips and counts it)"
            ) from exc
        if isinstance(exc, CountedSkip):
            reason, skip = exc.reason, exc
        elif isinstance(exc, SkipSample):
            reason, skip = "SkipSample", exc
        elif self.on_error == "raise":
            raise FatalSampleError(
                f"{type(self).__name__} failed on sample {_sample_key(sample)!r}: {type(exc).__name__}: {exc}"
            ) from exc
        else:
            reason = type(exc).__name__
            skip = SkipSample(f"{reason}: {exc}")
            skip.__cause__ = exc
        self._error_counts[reason] += 1
        self._consecutive_errors += 1
        if self.max_consecutive_errors and self._consecutive_errors >= self.max_consecutive_errors:
            raise FatalSampleError(
                f"{type(self).__name__}: {self._consecutive_errors} samples in a row were "
                f"skipped (last: {_sample_key(sample)!r}, {reason}: {exc}); counts so far: "
                f"{dict(self._error_counts)}"
            ) from exc
        skip._counted_by = self
        raise skip

    @stateless
    def cook_crude_sample(self, sample: Any, cooker: Any, aux: Any) -> Any:
        """Cook a crude sample with Energon's cooker; a failure follows ``on_error`` too."""
        try:
            return super().cook_crude_sample(sample, cooker, aux)
        except Exception as exc:  # noqa: BLE001 - the policy decides
            self.handle_error(exc, sample)

    # ------------------------------------------------------------------ deferred work
    def complete_samples(
        self, samples: list[EncodedSample]
    ) -> tuple[list[EncodedSample], torch.Tensor | None]:
        """Finish the work ``encode_sample`` deferred (e.g. image pixels) for these samples.

        Called with the samples of a pack before they are packed, and with the samples of a
        batch in ``batch``. Returns the finished samples and, when the encoder processed their
        images together, the pixel values of all of them in order (one tensor; each sample's
        ``pixel_values`` is a view into it), else ``None``. The default finishes nothing. Must
        be a pure function of the samples (restore replays it).
        """
        return samples, None

    # ------------------------------------------------------------------ batching
    def _padded_length(self, lengths: list[int]) -> int:
        longest = max(lengths)
        if self.padding == "seq_length":
            return max(self.seq_length, longest)
        return longest

    @stateless
    def batch(self, samples: list[EncodedSample]) -> MultiModalBatch:
        """Collate encoded samples into a :class:`MultiModalBatch`.

        ``input_ids`` are padded with :attr:`pad_token_id`, ``labels`` with the ignore index,
        ``loss_mask`` with 0. A row whose ``seq_lengths`` has several entries is a packed row:
        its position ids restart at every sub-sequence, the batch gets ``packed_seq_params``
        (THD) and no ``attention_mask``.
        """
        if not samples:
            raise ValueError("batch() got no samples")
        samples, all_pixels = self.complete_samples(samples)
        lengths = [s.length for s in samples]
        width = self._padded_length(lengths)
        bsz = len(samples)
        input_ids = torch.full((bsz, width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((bsz, width), self.ignore_index, dtype=torch.long)
        loss_mask = torch.zeros((bsz, width), dtype=torch.float32)
        position_ids = torch.zeros((bsz, width), dtype=torch.long)
        real = torch.zeros((bsz, width), dtype=torch.bool)
        packed = any(s.seq_lengths is not None and len(s.seq_lengths) > 1 for s in samples)
        segments: list[int] = []
        for row, sample in enumerate(samples):
            n = lengths[row]
            if sample.labels.shape[0] != n or sample.loss_mask.shape[0] != n:
                raise FatalPluginOutputError(
                    f"{self.plugin_label}: sample {_sample_key(sample)!r} has {n} input_ids, "
                    f"{sample.labels.shape[0]} labels and {sample.loss_mask.shape[0]} loss_mask "
                    "values; batch needs one length"
                )
            input_ids[row, :n] = sample.input_ids
            labels[row, :n] = sample.labels
            loss_mask[row, :n] = sample.loss_mask.to(torch.float32)
            real[row, :n] = True
            sub = list(sample.seq_lengths) if sample.seq_lengths else [n]
            if sum(sub) != n:
                raise ValueError(
                    f"sample {_sample_key(sample)!r}: seq_lengths {sub} sum to {sum(sub)}, "
                    f"but it has {n} tokens"
                )
            start = 0
            for sub_len in sub:
                position_ids[row, start : start + sub_len] = torch.arange(sub_len)
                start += sub_len
            if width > n:
                position_ids[row, n:] = torch.arange(width - n)
            segments.extend(sub)
            if width > n:
                segments.append(width - n)
        all_pixels = self.combined_pixels(samples, all_pixels)
        image_grid_thw = self.combine_parts("image_grid_thw", [s.image_grid_thw for s in samples])
        num_images = torch.tensor([int(s.num_images) for s in samples], dtype=torch.long)
        thd_params = packed_seq_params(segments) if packed else None
        batch = MultiModalBatch.from_samples(
            samples,
            input_ids=input_ids,
            labels=labels,
            loss_mask=loss_mask,
            position_ids=position_ids,
            attention_mask=None if packed else real,
            pixel_values=all_pixels,
            image_grid_thw=image_grid_thw,
            num_images=num_images,
            packed_seq_params=thd_params,
            visual=self.combine_visual([s.visual for s in samples]),
            token_fields=_pad_token_fields([s.token_fields for s in samples], lengths, width),
            image_token_counts=_token_counts([s.image_token_counts for s in samples]),
            num_videos=torch.tensor([int(s.num_videos) for s in samples], dtype=torch.long),
            video_token_counts=_token_counts([s.video_token_counts for s in samples]),
        )
        return self.finish_packed_batch(samples, batch)

    def collate_visual(self, key: str, parts: list[torch.Tensor]) -> torch.Tensor:
        """Combine the ``key`` tensors of several samples (in order) into one.

        ``key`` is a ``visual`` key, or ``pixel_values`` / ``image_grid_thw`` (which packing and
        ``batch`` combine the same way). The default concatenates along dim 0; override (or
        consult a per-key table) for inputs laid out otherwise, such as tiles padded to a
        common count. The result is written into output memory
        (:func:`~energon_plugins.encoding.memory.outputs.concatenated`: shared
        memory in a loader worker).
        """
        return concatenated(parts, dim=0)

    def combine_parts(self, key: str, parts: list[torch.Tensor | None]) -> torch.Tensor | None:
        """The samples' ``key`` tensors combined by :meth:`collate_visual` (``None`` if none;
        under the default layout one tensor is returned as it is, not copied)."""
        tensors = [p for p in parts if p is not None]
        if not tensors:
            return None
        if len(tensors) == 1 and type(self).collate_visual is PluginTaskEncoder.collate_visual:
            return tensors[0]
        return self.collate_visual(key, tensors)

    def combined_pixels(
        self, samples: list[EncodedSample], completed: torch.Tensor | None
    ) -> torch.Tensor | None:
        """The samples' ``pixel_values`` as one tensor: ``completed`` (the one tensor
        :meth:`complete_samples` built, a dim-0 concatenation) where ``collate_visual`` keeps
        the default layout, else :meth:`combine_parts`."""
        if completed is not None and type(self).collate_visual is PluginTaskEncoder.collate_visual:
            return completed
        return self.combine_parts("pixel_values", [s.pixel_values for s in samples])

    def combine_visual(self, visuals: list[dict[str, torch.Tensor] | None]) -> dict[str, torch.Tensor] | None:
        """Each key of the samples' ``visual`` mappings, combined by :meth:`collate_visual`."""
        keys = list(dict.fromkeys(key for visual in visuals if visual for key in visual))
        if not keys:
            return None
        return {
            key: self.collate_visual(key, [v[key] for v in visuals if v and v.get(key) is not None])
            for key in keys
        }

    @stateless
    def encode_batch(self, batch: MultiModalBatch) -> MultiModalBatch:
        """Return the batch unchanged (override to post-process a collated batch)."""
        return batch


def _pad_token_fields(
    fields: list[dict[str, torch.Tensor] | None], lengths: list[int], width: int
) -> dict[str, torch.Tensor] | None:
    """``(B, width)`` per-token fields, 0 past each row's length (and in rows without one)."""
    keys = list(dict.fromkeys(key for f in fields if f for key in f))
    if not keys:
        return None
    out = {}
    for key in keys:
        dtype = next(f[key].dtype for f in fields if f and key in f)
        padded = torch.zeros((len(fields), width), dtype=dtype)
        for row, f in enumerate(fields):
            if f and key in f:
                padded[row, : lengths[row]] = f[key]
        out[key] = padded
    return out


def _token_counts(counts: list[list[int] | None]) -> torch.Tensor | None:
    """Tokens per image (or video) over the batch, when every sample knows its counts."""
    if any(c is None for c in counts):
        return None
    return torch.tensor([n for c in counts for n in c], dtype=torch.long)  # type: ignore[union-attr]
