"""The built-in family rows: :data:`BUILTIN_FAMILIES` (the README's families table).

Each row is a :class:`~.family_spec.FamilySpec`; :mod:`.families` registers them and looks
a processor's row up (and re-exports :data:`BUILTIN_FAMILIES`).
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.family_spec import FamilySpec

_QWEN_GRID: dict[str, Any] = dict(
    grid="image_grid_thw", token_fields=("mm_token_type_ids",), pixel_budget=True
)
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
    FamilySpec(
        "glm-4v",
        ("Glm4vProcessor", "Glm46VProcessor"),
        visual=_QWEN_VIDEO,
        video_embedding_token="image_token",  # video frames are images inside video marks
        # The model fills images and video frames through the same token, so one forward
        # cannot hold both (transformers' Glm4vModel.get_placeholder_mask).
        video_with_images=False,
        end_of_turn=(),
        # GLM-4.1V-Thinking's template writes {{ msg.content }} for system and assistant turns.
        text_roles=("system", "assistant"),
        **_QWEN_GRID,
    ),
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
    FamilySpec(
        "gemma4",
        ("Gemma4Processor",),
        # (images, patches, D) and (images, patches, 2) positions; video frames likewise, all
        # videos' frames along dim 0, split back by num_frames_per_video.
        visual={
            "image_position_ids": "concat",
            "pixel_values_videos": "concat",
            "video_position_ids": "concat",
            "num_frames_per_video": "concat",
            # (clips, frames, 128) log-mel features and their frame mask, padded to the longest.
            "input_features": "pad_concat",
            "input_features_mask": "pad_concat",
        },
        token_fields=("mm_token_type_ids",),
        end_of_turn=("<turn|>",),  # its generation prompt breaks the prefix property
    ),
    # Gemma 4's layout for an encoder-free model: audio as raw waveform frames,
    # (clips, frames, samples per token) and their frame mask, padded to the longest.
    FamilySpec(
        "gemma4-unified",
        ("Gemma4UnifiedProcessor",),
        visual={
            "image_position_ids": "concat",
            "pixel_values_videos": "concat",
            "video_position_ids": "concat",
            "num_frames_per_video": "concat",
            "input_features": "pad_concat",
            "input_features_mask": "pad_concat",
        },
        token_fields=("mm_token_type_ids",),
        end_of_turn=("<turn|>",),
    ),
    FamilySpec(
        "gemma3n",
        ("Gemma3nProcessor",),
        # (clips, frames, 128) log-mel features and their frame mask, padded to the longest.
        visual={"input_features": "pad_concat", "input_features_mask": "pad_concat"},
        token_fields=("token_type_ids",),
    ),
    # (tiles, C, H, W): every image's tiles and global view; <|patch|> holds the embeddings.
    FamilySpec("llama4", ("Llama4Processor",), embedding_token="img_patch_token"),
    FamilySpec("internvl", ("InternVLProcessor",), video_embedding_token="image_token"),
    FamilySpec(
        "pixtral",
        ("PixtralProcessor",),
        pixel_values="pad_concat",
        visual={"image_sizes": "concat"},
        system_as_text=True,
    ),
    # Mistral Small 3.x ships Pixtral's processor with 2x2 patch merging (Mistral3 models).
    FamilySpec(
        "mistral3",
        ("PixtralProcessor",),
        pixel_values="pad_concat",
        visual={"image_sizes": "concat"},
        processor_attrs={"spatial_merge_size": 2},
    ),
    # Pixtral's image processor, one <|image_pad|> per merged 2x2 patch (no row breaks).
    FamilySpec(
        "lighton-ocr",
        ("LightOnOcrProcessor",),
        pixel_values="pad_concat",
        visual={"image_sizes": "concat"},
    ),
    FamilySpec(
        "llava-next-video",
        ("LlavaNextVideoProcessor",),
        pixel_values="pad_concat",
        visual={"image_sizes": "concat", "pixel_values_videos": "concat"},
        fixed_video_frames=True,
    ),
    FamilySpec(
        "video-llava",
        ("VideoLlavaProcessor",),
        visual={"pixel_values_images": "concat", "pixel_values_videos": "concat"},
        fixed_video_frames=True,
    ),
    # Its template closes an answer with <｜end▁of▁sentence｜> only when another turn follows:
    # no answer's label takes it, so every answer ends alike.
    FamilySpec("deepseek-vl", ("DeepseekVLProcessor",), end_of_turn=()),
    # DeepSeek-VL's template; each image also as a SAM view, one row per image along dim 0.
    FamilySpec(
        "deepseek-vl-hybrid",
        ("DeepseekVLHybridProcessor",),
        visual={"high_res_pixel_values": "concat"},
        end_of_turn=(),
    ),
    # Tiles of all images along dim 0; the model fills the tokenizer's <IMG_ATOM> tokens.
    FamilySpec("ovis2", ("Ovis2Processor",), embedding_token="tokenizer.image_token", drop=("grids",)),
    # Image understanding; like DeepSeek-VL, no answer's label takes <｜end▁of▁sentence｜>.
    FamilySpec("janus", ("JanusProcessor",), end_of_turn=()),
    FamilySpec(
        "idefics2",
        ("Idefics2Processor",),
        pixel_values="image_row",
        visual={"pixel_attention_mask": "image_row"},
        placeholder_offsets="idefics2",
    ),
    FamilySpec(
        "perception-lm",
        ("PerceptionLMProcessor",),
        visual={"pixel_values_videos": "concat"},
        fixed_video_frames=True,  # (videos, frames, C, H, W): one frame count per batch
        text_roles=("system",),  # the template writes a system content with |trim
    ),
    FamilySpec(
        "lfm2-vl",
        ("Lfm2VlProcessor",),
        # One row per tile, padded to the processor's max_num_patches.
        visual={"pixel_attention_mask": "concat", "spatial_shapes": "concat"},
    ),
    # Qwen2-VL patches and grids for images and videos, Whisper windows for audio.
    FamilySpec(
        "qwen2.5-omni",
        ("Qwen2_5OmniProcessor",),
        visual={
            **_QWEN_VIDEO,
            "video_second_per_grid": "concat",
            "input_features": "concat",
            "feature_attention_mask": "concat",
        },
        drop=("num_audio_tokens",),
        grid="image_grid_thw",
        pixel_budget=True,  # no mm_token_type_ids: the thinker finds its tokens by id
    ),
    # Qwen2.5-Omni's layout with 16-pixel patches; a call's clips are padded to the longest
    # (not to 30 s), so the (clips, 128, frames) features and their masks pad across samples.
    FamilySpec(
        "qwen3-omni",
        ("Qwen3OmniMoeProcessor",),
        visual={
            **_QWEN_VIDEO,
            "video_second_per_grid": "concat",
            "input_features": "pad_concat",
            "feature_attention_mask": "pad_concat",
        },
        drop=("num_audio_tokens",),
        grid="image_grid_thw",
        pixel_budget=True,
    ),
    # Audio only: one (128, 3000) log-mel window and its frame mask per clip, along dim 0.
    FamilySpec(
        "qwen2-audio",
        ("Qwen2AudioProcessor",),
        visual={"input_features": "concat", "feature_attention_mask": "concat"},
        drop=("num_audio_tokens",),
    ),
    # Audio only, one clip per text (the processor raises on more): one (128, 3000) log-mel
    # window and its frame mask per 30 s of the clip, along dim 0.
    FamilySpec(
        "glmasr",
        ("GlmAsrProcessor",),
        visual={"input_features": "concat", "input_features_mask": "concat"},
        drop=("num_audio_tokens",),
        end_of_turn=(),  # GLM's template: the next turn's role token closes an answer
        max_audio_clips=1,
    ),
    FamilySpec(
        "audioflamingo3",
        ("AudioFlamingo3Processor",),
        visual={"input_features": "concat", "input_features_mask": "concat"},
        drop=("num_audio_tokens",),
        max_audio_clips=1,
    ),
    FamilySpec(
        "musicflamingo",
        ("MusicFlamingoProcessor",),
        visual={"input_features": "concat", "input_features_mask": "concat"},
        drop=("num_audio_tokens",),
        max_audio_clips=1,
    ),
    # One clip per text, its mel frames padded to whole 100-frame windows (a call's clips to
    # the longest): zero-padded to the batch's longest.
    FamilySpec(
        "qwen3-asr",
        ("Qwen3ASRProcessor",),
        visual={"input_features": "pad_concat", "input_features_mask": "pad_concat"},
        drop=("num_audio_tokens",),
        max_audio_clips=1,
    ),
    # Whisper windows (one row per 30 s of a clip) and each clip's raw-sample mask, zero-padded
    # to the batch's longest clip.
    FamilySpec(
        "moss-transcribe-diarize",
        ("MossTranscribeDiarizeProcessor",),
        visual={
            "input_features": "concat",
            "input_features_mask": "concat",
            "padding_mask": "pad_concat",
        },
        drop=("num_audio_tokens",),
    ),
    # Qwen-style patches and grids of one-frame images (temporal_patch_size 1), images only.
    FamilySpec("paddleocr-vl", ("PaddleOCRVLProcessor",), **_QWEN_GRID),
    # Qwen-style patches and grids, one merge size per image / video, and the compression
    # mask of the videos' merged tokens (a 1-D bool per token), all along dim 0. Its video
    # size edges are the whole video's pixels, not a frame's: no per-frame pixel budget.
    FamilySpec(
        "videollama3",
        ("VideoLlama3Processor",),
        grid="image_grid_thw",
        visual={
            "image_merge_sizes": "concat",
            **_QWEN_VIDEO,
            "video_merge_sizes": "concat",
            "video_compression_mask": "concat",
        },
    ),
    # GLM-5.3-Flash: GLM-4V's layout (frames are <|image|> tokens inside video marks, which
    # tell the model a frame from an image), sized by min/max_image_tokens, not size edges.
    FamilySpec(
        "glm-5-next",
        ("Glm5NextProcessor",),
        grid="image_grid_thw",
        visual=_QWEN_VIDEO,
        token_fields=("mm_token_type_ids",),
        video_embedding_token="image_token",
        end_of_turn=(),
    ),
    # HunyuanOCR: Qwen-style patches and grids; its template writes an answer as
    # {{ message['content'] }} and reads a system content as a string.
    FamilySpec(
        "hunyuan-vl",
        ("HunYuanVLProcessor",),
        text_roles=("system", "assistant"),
        **_QWEN_GRID,
    ),
    # PP-Chart2Table (GOT-OCR2's model): the template writes one image's 256 <imgpad> in every
    # user turn (the processor expands nothing), an answer as {{ message.get('content') }}.
    FamilySpec(
        "pp-chart2table",
        ("PPChart2TableProcessor",),
        text_roles=("assistant",),
        placeholder_offsets="written_runs",
        image_per_user_turn=True,
    ),
    # Every image padded to one square (max_image_size): one row of pixels and of its pixel
    # mask per image (per crop when split), along dim 0.
    FamilySpec("aria", ("AriaProcessor",), visual={"pixel_mask": "concat"}),
    # Cross-attention: one <|image|> token per image. A sample keeps one row of its images'
    # (images, tiles, C, H, W) tiles, aspect-ratio ids and tile mask (a pack: its samples'
    # images in order); the batch layout regroups them per row and builds the
    # cross_attention_mask from the collated ids, so the processor's own is not kept.
    FamilySpec(
        "mllama",
        ("MllamaProcessor",),
        pixel_values="image_row",
        visual={"aspect_ratio_ids": "image_row", "aspect_ratio_mask": "image_row"},
        drop=("cross_attention_mask",),
        placeholder_offsets="mllama",
        batch_layout="mllama",
    ),
    # Each image a global view and its crops, (images, crops, C, H, W) padded to the most
    # crops as the processor pads them (zero pixels, all-visible crop masks); audio as
    # (clips, frames, 80) log-mel features, one mask row per clip (a one-clip call has none).
    FamilySpec(
        "phi4-multimodal",
        ("Phi4MultimodalProcessor",),
        visual={
            "image_pixel_values": "pad_concat",
            "image_sizes": "concat",
            "image_attention_mask": "pad_concat_ones",
            "audio_input_features": "pad_concat",
            "audio_embed_sizes": "concat",
            "audio_attention_mask": "pad_concat",
        },
        filled_masks={"audio_attention_mask": "audio_input_features"},
        # <|end|> closes an answer; the template writes <|endoftext|> after the last turn,
        # labelled with the last answer (as the checkpoint's fine-tuning recipe labels it).
        end_of_turn=("<|end|><|endoftext|>", "<|end|>"),
    ),
)
"""The families this distribution knows (the README's families table)."""
