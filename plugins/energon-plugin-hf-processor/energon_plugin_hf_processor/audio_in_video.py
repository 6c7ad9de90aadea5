"""Qwen-Omni's ``use_audio_in_video``: each ``<video>`` part's own sound track as its audio.

With ``audio.use_audio_in_video`` (Qwen2.5-Omni, Qwen3-Omni), :class:`AudioInVideo` decodes
the sound track of every video of a sample with the audio path of :mod:`.audio` (the
container's first audio stream: :func:`~.audio.audio_header`, :func:`~.audio.decode_audio`,
the ``audio.max_seconds`` budget over all of the sample's clips and the feature extractor's
window), in conversation order among the ``<audio>`` parts' clips. The processor is then
called as ``processor.apply_chat_template(..., load_audio_from_video=True)`` calls it: the
clips as ``audio=``, ``audio_from_video_indices`` (per clip, the video it comes from, ``None``
for an ``<audio>`` part) and ``load_audio_from_video=True`` (transformers' current name of
``use_audio_in_video``). The processor then writes each video's audio tokens inside the
video's placeholder, interleaved with its frames' tokens by time (Qwen2.5-Omni: in 2 s chunks;
Qwen3-Omni: token by token); the whole span is the video's, so never labelled.

A video without a sound track is a counted skip (reason ``audio``), or an error naming the
part under ``on_error: raise``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from typing import Any

from energon_plugin_hf_processor.audio import (
    AudioDecodeError,
    DecodedAudio,
    NoSoundTrack,
    ProcessorAudio,
    as_av_decoder,
    audio_header,
)
from energon_plugins import ConfigError

OPTION = "task_encoder.options.audio.use_audio_in_video"
"""The option, as errors name it."""


@dataclasses.dataclass(frozen=True)
class VideoSoundTrack(DecodedAudio):
    """The decoded sound track of a sample's video.

    Attributes:
        video_index: the video's place among the sample's videos.
    """

    video_index: int = 0


def takes_audio_in_video(processor: Any) -> bool:
    """Whether ``processor`` interleaves a video's audio tokens with its frames' tokens: its
    call takes ``load_audio_from_video`` (its kwargs typing) and it writes the interleaved
    placeholder (``replace_video_with_audio_token``, not the base class's stub)."""
    kwargs_type = getattr(processor, "valid_processor_kwargs", None)
    try:
        keys = typing.get_type_hints(kwargs_type) if kwargs_type is not None else {}
    except Exception:  # noqa: BLE001 - a kwargs class typing cannot read: no such keyword
        keys = getattr(kwargs_type, "__annotations__", {})
    method = getattr(type(processor), "replace_video_with_audio_token", None)
    own = method is not None and not method.__qualname__.startswith("OmniModalProcessorMixin.")
    return "load_audio_from_video" in keys and own


class AudioInVideo:
    """A sample's audio clips, with each video's sound track among them when asked.

    Args:
        processor: the transformers processor.
        audio: the processor's audio side (sampling rate, window, the ``audio`` options).

    Raises:
        ConfigError: ``audio.use_audio_in_video`` for a processor without video and audio
            inputs, or one whose call does not take it.
    """

    def __init__(self, processor: Any, audio: ProcessorAudio) -> None:
        self.audio = audio
        #: Whether each video's sound track is decoded and given to the processor.
        self.enabled = audio.options.use_audio_in_video
        if not self.enabled:
            return
        name = type(processor).__name__
        if getattr(processor, "video_processor", None) is None or not audio.available:
            raise ConfigError(f"{OPTION}: {name} does not take both videos and audio")
        if not takes_audio_in_video(processor):
            raise ConfigError(
                f"{OPTION}: {name}'s call does not take load_audio_from_video (use_audio_in_video); "
                "Qwen2.5-Omni's and Qwen3-Omni's processors do. Give a video's sound track as its "
                "own <audio> part instead"
            )

    def decode(
        self,
        sample: Any,
        messages: Sequence[dict[str, Any]],
        audios: Sequence[tuple[Any, str]],
        videos: Sequence[tuple[Any, str]],
    ) -> list[DecodedAudio]:
        """The kept audio of a sample: its ``<audio>`` clips and, when enabled, each video's
        sound track (a :class:`VideoSoundTrack`), in the order of their parts in ``messages``.

        Raises:
            AudioDecodeError: a clip cannot be read, or a video has no sound track.
            CountedSkip: the sample is over ``audio.max_seconds`` (``audio_too_long``).
        """
        if not self.enabled or not videos:
            return self.audio.decode(sample, audios) if audios else []
        parts = [p["type"] for m in messages for p in m["content"] if p["type"] in ("audio", "video")]
        next_audio, next_video = iter(audios), iter(enumerate(videos))
        clips: list[tuple[Any, str, int | None]] = []
        for kind in parts:
            if kind == "audio":
                clip, name = next(next_audio)
                clips.append((as_av_decoder(clip), name, None))
            else:
                index, (video, name) = next(next_video)
                clips.append((as_av_decoder(video), name, index))
        return self._decode_clips(sample, clips)

    def _decode_clips(self, sample: Any, clips: list[tuple[Any, str, int | None]]) -> list[DecodedAudio]:
        """:meth:`.audio.ProcessorAudio.decode_opened` of ``(decoder, part, video index)``
        clips, a video's as a :class:`VideoSoundTrack`."""
        headers = []
        for decoder, name, index in clips:
            try:
                headers.append(audio_header(decoder, name))
            except NoSoundTrack as exc:
                if index is None:
                    raise
                raise AudioDecodeError(f"video {name} has no sound track ({OPTION})") from exc
        decoded = self.audio.decode_opened(sample, [(decoder, name) for decoder, name, _ in clips], headers)
        return [
            clip if index is None else VideoSoundTrack(**vars(clip), video_index=index)  # no copy
            for clip, (_, _, index) in zip(decoded, clips)
        ]

    def call_kwargs(self, audios: Sequence[DecodedAudio]) -> dict[str, Any]:
        """The processor call's keywords for these clips: with a video's sound track among
        them, ``load_audio_from_video`` and each clip's video (``None``: an ``<audio>`` part),
        as ``apply_chat_template`` passes them; otherwise none."""
        if not any(isinstance(clip, VideoSoundTrack) for clip in audios):
            return {}
        return {
            "load_audio_from_video": True,
            "audio_from_video_indices": [
                clip.video_index if isinstance(clip, VideoSoundTrack) else None for clip in audios
            ],
        }
