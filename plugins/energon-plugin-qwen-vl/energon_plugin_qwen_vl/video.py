"""Qwen2-VL videos for the ``qwen2-vl`` task encoder: transformers' ``Qwen2VLVideoProcessor``
on the frames the core's video options keep.

The video processor shares the image processor's ``patch_size``, ``merge_size`` and
``temporal_patch_size``; its per-frame pixel budget is ``video.min_pixels`` /
``video.max_pixels`` (transformers' defaults otherwise). A video becomes
``t * h * w / merge_size^2`` ``<|video_pad|>`` tokens, from its ``video_grid_thw``; the grid is
known from the frame size before a frame is decoded (``get_num_of_video_patches``), so the
budget tries plans without decoding and decodes only the plan it keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from energon_plugins import SampledVideo, VideoInfo, VideoOptions, VideoPlan


class QwenVideo:
    """The video processor of a ``qwen2-vl`` encoder and what the budget asks of it.

    Args:
        image_processor: the encoder's image processor (its patch, merge and temporal sizes).
        options: the encoder's ``video`` options.
    """

    def __init__(self, image_processor: Any, options: VideoOptions) -> None:
        import transformers

        inner = getattr(image_processor, "processor", image_processor)
        sizes = {
            name: int(getattr(inner, name, default))
            for name, default in (("patch_size", 14), ("merge_size", 2), ("temporal_patch_size", 2))
        }
        defaults = transformers.Qwen2VLVideoProcessor.size
        size = {
            "shortest_edge": options.min_pixels or defaults["shortest_edge"],
            "longest_edge": options.max_pixels or defaults["longest_edge"],
        }
        size["shortest_edge"] = min(size["shortest_edge"], size["longest_edge"])
        #: transformers' video processor (``preview`` undoes its normalisation too).
        self.processor = transformers.Qwen2VLVideoProcessor(size=size, **sizes)
        self.options = options
        self.merge_size = sizes["merge_size"]
        self.frame_multiple = int(options.frame_multiple or sizes["temporal_patch_size"])
        self.max_pixels = int(size["longest_edge"])
        self._min_pixels = int(size["shortest_edge"])

    def size(self, plan: VideoPlan) -> dict[str, int]:
        """The ``size`` edges of a plan (its ``max_pixels``)."""
        longest = plan.max_pixels or self.max_pixels
        return {"shortest_edge": min(self._min_pixels, longest), "longest_edge": longest}

    def predicted_tokens(self, infos: Sequence[VideoInfo], plan: VideoPlan) -> list[int]:
        """Each video's ``<|video_pad|>`` count under ``plan``, without decoding."""
        kwargs = {"size": self.size(plan)}
        return [
            self.processor.get_num_of_video_patches(n, info.height, info.width, kwargs) // self.merge_size**2
            for n, info in zip(plan.frames, infos)
        ]

    def __call__(self, videos: Sequence[SampledVideo], plan: VideoPlan) -> dict[str, Any]:
        """``pixel_values_videos`` ``(patches, D)`` and ``video_grid_thw`` ``(videos, 3)``."""
        out = self.processor(
            videos=[video.frames for video in videos],
            size=self.size(plan),
            cap_pixels_per_frame=False,
            return_tensors="pt",
        )
        return {"pixel_values_videos": out["pixel_values_videos"], "video_grid_thw": out["video_grid_thw"]}

    def token_counts(self, grid: Any) -> list[int]:
        """``t * h * w / merge_size^2`` per video, from ``video_grid_thw``."""
        return [int(t * h * w) // self.merge_size**2 for t, h, w in grid.tolist()]
