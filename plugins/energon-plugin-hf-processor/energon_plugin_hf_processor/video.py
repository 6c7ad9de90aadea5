"""What the ``hf-processor`` encoder asks of a processor's video processor.

:class:`ProcessorVideo` holds, for one processor and family, the frame multiple (the video
processor's ``temporal_patch_size``), the per-frame pixel cap in force, the keyword arguments
of a processor call with pre-sampled frames (``do_sample_frames=False`` and each video's
``video_metadata``: frame rate, frame count and the kept frame numbers, from which Qwen2.5-VL
derives ``second_per_grid_ts`` and Qwen3-VL / SmolVLM the time stamps they write), and a
token count of a plan without decoding (the processor's ``_get_num_multimodal_tokens``, where
it counts videos: Qwen2/2.5/3-VL, LLaVA-OneVision, GLM-4V).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from energon_plugin_hf_processor.families import FamilySpec
from energon_plugins import ConfigError, SampledVideo, VideoInfo, VideoOptions, VideoPlan, budget_plans


class ProcessorVideo:
    """A processor's video side, as the encoder uses it.

    Args:
        processor: the transformers processor (its ``video_processor`` may be missing).
        family: the processor's family spec.
        options: the encoder's ``video`` options.
        user_kwargs: the encoder's ``processor_kwargs`` (a video keyword there wins).

    Raises:
        ConfigError: ``video.min_pixels`` / ``max_pixels`` / ``budget_min_pixels`` for a video
            processor without a pixel budget.
    """

    def __init__(
        self, processor: Any, family: FamilySpec, options: VideoOptions, user_kwargs: dict[str, Any]
    ) -> None:
        self.processor = processor
        self.family = family
        self.options = options
        self.video_processor = getattr(processor, "video_processor", None)
        self.user_kwargs = user_kwargs
        vp = self.video_processor
        size = getattr(vp, "size", None)
        #: Whether frame sizes are a pixel budget (Qwen-style ``size`` edges).
        self.pixel_budget = family.pixel_budget and getattr(size, "longest_edge", None) is not None
        if not self.pixel_budget:
            for name in ("min_pixels", "max_pixels", "budget_min_pixels"):
                if getattr(options, name) is not None:
                    raise ConfigError(
                        f"task_encoder.options.video.{name}: the "
                        f"{type(vp).__name__ if vp is not None else 'processor (no video processor)'}"
                        f" of {type(processor).__name__} has no per-frame pixel budget (Qwen2/2.5/"
                        "3-VL's video processors have); its frames have a fixed size"
                    )
        #: Kept frame counts are rounded down to a multiple of this.
        self.frame_multiple = int(options.frame_multiple or getattr(vp, "temporal_patch_size", 1) or 1)
        #: The per-frame pixel cap in force (``None``: no pixel budget).
        self.max_pixels = (options.max_pixels or int(size.longest_edge)) if self.pixel_budget else None
        self._min_pixels = (options.min_pixels or int(size.shortest_edge)) if self.pixel_budget else None

    @property
    def available(self) -> bool:
        """Whether the processor has a video processor."""
        return self.video_processor is not None

    def plans(self, infos: Sequence[VideoInfo]) -> Iterator[VideoPlan]:
        """The plans to try for a sample's videos, best first (one plan for a family whose
        videos need one frame count: LLaVA-OneVision)."""
        plans = budget_plans(infos, self.options, self.frame_multiple, max_pixels=self.max_pixels)
        if self.family.fixed_video_frames:
            return itertools.islice(plans, 1)
        return plans

    def size_kwargs(self, plan: VideoPlan) -> dict[str, Any]:
        """``{"size": ...}`` of a plan for a pixel-budget video processor (else empty)."""
        if not self.pixel_budget:
            return {}
        changed = (
            self.options.min_pixels is not None
            or self.options.max_pixels is not None
            or plan.max_pixels != self.max_pixels
        )
        if not changed or "size" in self.user_kwargs:
            return {}
        return {
            "size": {"shortest_edge": min(self._min_pixels, plan.max_pixels), "longest_edge": plan.max_pixels}
        }

    def call_kwargs(self, videos: Sequence[SampledVideo], plan: VideoPlan) -> dict[str, Any]:
        """The ``videos_kwargs`` of a processor call on pre-sampled frames."""
        kwargs: dict[str, Any] = {
            "do_sample_frames": False,
            "video_metadata": [video.metadata() for video in videos],
            **self.size_kwargs(plan),
        }
        # Qwen's video processors warn unless the per-frame cap choice is explicit; False is
        # their current behaviour (and the processor's own output with the default).
        if (
            getattr(self.video_processor, "cap_pixels_per_frame", False) is None
            and "cap_pixels_per_frame" not in self.user_kwargs
        ):
            kwargs["cap_pixels_per_frame"] = False
        return kwargs

    def predicted_tokens(self, infos: Sequence[VideoInfo], plan: VideoPlan) -> list[int] | None:
        """Each video's token count under ``plan``, from the processor without decoding, or
        ``None`` where the processor cannot count videos."""
        counter = getattr(self.processor, "_get_num_multimodal_tokens", None)
        if counter is None:
            return None
        sizes = [(n, info.height, info.width) for n, info in zip(plan.frames, infos)]
        try:
            data = counter(video_sizes=sizes, videos_kwargs=self.size_kwargs(plan))
            counts = data["num_video_tokens"]
        except Exception:  # noqa: BLE001 - a processor that cannot count videos
            return None
        if counts is None or len(counts) != len(infos):
            return None
        return [int(c) for c in counts]
