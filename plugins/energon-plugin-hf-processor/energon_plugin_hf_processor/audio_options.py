"""The ``audio`` options of the ``hf-processor`` task encoder (import-light: pydantic only)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class AudioOptions(BaseModel):
    """How a sample's audio clips are placed, read and budgeted.

    Attributes:
        tag: the text placeholder of one audio clip in conversations (``<audio>``); typed parts
            ``{"type": "audio"}`` need none.
        max_seconds: the audio budget of one sample, in seconds over all its clips; ``None``:
            no budget (the feature extractor's own window, Whisper's 30 s, still applies).
        over_budget: what happens to a sample whose clips last longer than ``max_seconds``:
            ``skip`` (the default) skips it, counted under ``audio_too_long``; ``clip`` keeps
            the first ``max_seconds`` of its audio (clips in order, the one that crosses the
            budget cut short; a sample whose budget runs out before its last clip starts is
            still skipped and counted: every clip has a placeholder in the text).
        use_audio_in_video: Qwen-Omni's ``use_audio_in_video`` (Qwen2.5-Omni, Qwen3-Omni): each
            ``<video>`` part's own sound track is decoded too (under ``max_seconds``, in
            conversation order among the clips) and the processor writes its audio tokens
            interleaved with the video's; a video without a sound track is skipped and counted
            (``audio``). The model must be called with ``use_audio_in_video=True`` too.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: str = Field(
        default="<audio>",
        min_length=1,
        description="The text placeholder of one audio clip in conversations (<audio>).",
    )
    max_seconds: float | None = Field(
        default=None,
        gt=0,
        description="The audio budget of one sample, in seconds over all its clips; None: no "
        "budget (the feature extractor's window, Whisper's 30 s, still applies).",
    )
    over_budget: Literal["skip", "clip"] = Field(
        default="skip",
        description="A sample whose audio lasts longer than max_seconds is skipped and counted "
        "(audio_too_long), or its clips are cut to fit (clip).",
    )
    use_audio_in_video: bool = Field(
        default=False,
        description="Qwen-Omni's use_audio_in_video (Qwen2.5-Omni, Qwen3-Omni): each <video> "
        "part's own sound track is decoded as audio too and its audio tokens are interleaved with "
        "the video's; a video without a sound track is skipped and counted (audio).",
    )
