"""``VideoOptions``: which frames of a video are kept, at what resolution, within what budget.

One pydantic model (import-light: pydantic only) that any task encoder can take as its
``video`` option: the ``hf-processor`` and ``qwen2-vl`` encoders do. The frame choice itself is
:func:`energon_plugins.encoding.video.sampling.frame_indices`; the budget trade is
:func:`energon_plugins.encoding.video.budget.budget_plans`.
"""

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_FPS = 2.0
"""Frames per second of video time kept when neither ``num_frames`` nor ``fps`` is set (the
rate Qwen2-VL / Qwen2.5-VL / Qwen3-VL train with)."""


class VideoOptions(BaseModel):
    """How videos are sampled and budgeted (the ``video`` option of a task encoder).

    Frames: ``num_frames`` frames spread uniformly over the video, or ``fps`` frames per second
    of video time (2 when neither is set); the count is then held between ``min_frames`` and
    ``max_frames`` (and the video's own frame count) and rounded down to ``frame_multiple``.
    Each kept frame is the one at the middle of its equal share of the video. Only the kept
    frames are decoded (Energon's AV decoder seeks to them).

    Budget: a sample with videos whose visual tokens (its images' and videos') exceed
    ``max_visual_tokens``, or that is longer than ``seq_length``, gives up frames first (a quarter
    at a time, down to ``min_frames`` per video), then resolution (``max_pixels`` lowered by a
    quarter at a time, down to ``budget_min_pixels``; processors with a pixel budget only);
    a sample that still does not fit is skipped and counted (``video_budget``), or raises under
    ``on_error: raise``.
    """

    model_config = ConfigDict(extra="forbid")

    num_frames: int | None = Field(
        default=None,
        ge=1,
        description="Keep this many frames, spread uniformly over the video (the video's own "
        "frame count if it has fewer). Excludes fps.",
    )
    fps: float | None = Field(
        default=None,
        gt=0,
        description="Keep this many frames per second of video time; None: 2.0 unless "
        "num_frames is set. Excludes num_frames.",
    )
    min_frames: int = Field(
        default=1,
        ge=1,
        description="Fewest frames kept of a video (short videos under fps sampling, and the "
        "floor the budget trades frames down to).",
    )
    max_frames: int = Field(
        default=32,
        ge=1,
        description="Most frames kept of a video.",
    )
    frame_multiple: int | None = Field(
        default=None,
        ge=1,
        description="Round the frame count down to a multiple of this (Qwen's temporal patch "
        "holds 2 frames); None: the encoder's choice (the video processor's "
        "temporal_patch_size, else 1).",
    )
    min_pixels: int | None = Field(
        default=None,
        ge=1,
        description="Frames smaller than this many pixels are scaled up (dynamic-resolution "
        "video processors: Qwen2/2.5/3-VL); None keeps the processor's setting.",
    )
    max_pixels: int | None = Field(
        default=None,
        ge=1,
        description="Frames larger than this many pixels are scaled down (same processors); "
        "None keeps the processor's setting.",
    )
    max_visual_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Visual tokens a sample with videos may take (its images count too); "
        "over it (or over seq_length), frames then resolution are given up before the sample "
        "is skipped. None: no budget (a video sample longer than seq_length is still traded "
        "down, then skipped).",
    )
    budget_min_pixels: int | None = Field(
        default=None,
        ge=1,
        description="The lowest per-frame max_pixels the budget may go down to (processors "
        "with a pixel budget); None: the budget never lowers the resolution.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> "VideoOptions":
        if self.num_frames is not None and self.fps is not None:
            raise ValueError("num_frames and fps exclude each other: set one of them")
        if self.min_frames > self.max_frames:
            raise ValueError(f"min_frames ({self.min_frames}) must not exceed max_frames ({self.max_frames})")
        if self.min_pixels is not None and self.max_pixels is not None:
            if self.min_pixels > self.max_pixels:
                raise ValueError(
                    f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})"
                )
        if self.budget_min_pixels is not None and self.max_pixels is not None:
            if self.budget_min_pixels > self.max_pixels:
                raise ValueError(
                    f"budget_min_pixels ({self.budget_min_pixels}) must not exceed max_pixels "
                    f"({self.max_pixels})"
                )
        return self

    @property
    def rate(self) -> float | None:
        """The frames per second sampled (``None`` when ``num_frames`` is set)."""
        if self.num_frames is not None:
            return None
        return self.fps if self.fps is not None else DEFAULT_FPS
