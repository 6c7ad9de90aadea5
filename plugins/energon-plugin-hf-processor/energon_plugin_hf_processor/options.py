"""Options of the ``hf-processor`` task encoder (import-light: pydantic only)."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from energon_plugin_hf_processor.audio_options import AudioOptions
from energon_plugins import MegatronLMPrompts, VideoOptions


class HFProcessorOptions(BaseModel):
    """Options of the ``hf-processor`` task encoder."""

    model_config = ConfigDict(extra="forbid")

    processor: str | None = Field(
        default=None,
        min_length=1,
        description="A local directory that transformers' AutoProcessor.from_pretrained loads "
        "(the model's own directory: tokenizer, image processor and chat template); nothing is "
        "downloaded. None: the directory tokenizer.path names.",
    )
    trust_remote_code: bool = Field(
        default=False,
        description="Let AutoProcessor run code shipped in the processor directory (needed by "
        "processors outside transformers). Off unless you set it.",
    )
    family: str | None = Field(
        default=None,
        description="The family spec to use (qwen2-vl, llava-next, ...); None picks it from "
        "the processor's class.",
    )
    system_prompt: str | None = Field(
        default=None,
        description="A system turn put before every conversation that has none; None leaves "
        "it to the chat template (Qwen2-VL's adds its own).",
    )
    caption_prompt: str = Field(
        default="Describe this image.",
        description="The user text of a captioning sample (the caption is the answer).",
    )
    min_pixels: int | None = Field(
        default=None,
        ge=1,
        description="Images smaller than this many pixels are scaled up (processors with "
        "dynamic resolution: Qwen2/2.5/3-VL, GLM-4V); None keeps the processor's setting.",
    )
    max_pixels: int | None = Field(
        default=None,
        ge=1,
        description="Images larger than this many pixels are scaled down (same processors); "
        "None keeps the processor's setting.",
    )
    max_images: int | None = Field(
        default=None,
        ge=0,
        description="A sample with more images is skipped and counted (too_many_images), or "
        "fails under on_error: raise. None: no limit.",
    )
    video: VideoOptions = Field(
        default_factory=VideoOptions,
        description="How the videos of a sample are sampled (num_frames or fps, min/max "
        "frames), sized (min/max_pixels per frame) and budgeted (max_visual_tokens: fewer "
        "frames, then lower resolution, before a skip); see VideoOptions.",
    )
    audio: AudioOptions = Field(
        default_factory=AudioOptions,
        description="How the audio clips of a sample are placed (tag: <audio>) and budgeted "
        "(max_seconds per sample; over_budget: skip, counted as audio_too_long, or clip); see "
        "AudioOptions.",
    )
    megatron_lm: MegatronLMPrompts = Field(
        default_factory=MegatronLMPrompts,
        description="Prompts of Megatron-LM's sample types (OCRSample, MultiChoiceVQASample, "
        "SimilarityInterleavedSample, TextSample); see MegatronLMPrompts. Its system_prompt wins "
        "over system_prompt for these samples (set it to null to use system_prompt).",
    )
    degrade_tiles: bool = Field(
        default=False,
        description="For a processor that tiles (InternVL's, crop_to_patches with max_patches): a "
        "sample longer than seq_length is encoded again with fewer tiles per image, stepping the "
        "maximum down along tile_degradation, before it is skipped (Megatron-LM's rule).",
    )
    tile_degradation: dict[int, int] = Field(
        default_factory=lambda: {12: 8, 8: 6, 6: 4, 4: 2, 2: 1},
        description="Maximum tiles per image -> the maximum to try next (Megatron-LM's steps by "
        "default); the processor's own max_patches must be a key.",
    )
    processor_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Further keyword arguments of every processor call (do_image_splitting, "
        "max_patches, ...), checked with one call when the encoder is built.",
    )
    padding: Literal["seq_length", "longest"] = Field(
        default="seq_length",
        description="Pad batches to seq_length (fixed shapes) or to the longest row.",
    )
    on_error: Literal["skip", "raise"] = Field(
        default="skip",
        description="A sample that fails to cook or encode, is longer than seq_length, has "
        "too many images, a video that cannot be decoded or no plan within the video budget is "
        "skipped and counted, or raises.",
    )

    @model_validator(mode="after")
    def _pixel_range(self) -> "HFProcessorOptions":
        if self.min_pixels is not None and self.max_pixels is not None:
            if self.min_pixels > self.max_pixels:
                raise ValueError(
                    f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})"
                )
        reserved = {
            "text",
            "images",
            "videos",
            "return_tensors",
            "return_offsets_mapping",
            "return_text_replacement_offsets",
            "add_special_tokens",
            "images_kwargs",
            "videos_kwargs",
            "audio",
            "audio_kwargs",
            "video_metadata",
            "do_sample_frames",
            "load_audio_from_video",
            "use_audio_in_video",
            "audio_from_video_indices",
        }
        for high, low in self.tile_degradation.items():
            if high > 1 and not 1 <= low < high:
                raise ValueError(f"tile_degradation: {high}: {low} does not step down")
        clash = sorted(reserved & set(self.processor_kwargs))
        if clash:
            raise ValueError(f"processor_kwargs: {', '.join(clash)} are set by the encoder")
        return self
