"""Audio clips of a sample, decoded with Energon's AV decoder, as a processor's audio input.

A crude conversation sample's audio parts (``0.wav``, ``1.flac``, ``2.mp3``, ``3.m4a``,
``4.ogg``, or a video container's audio track: ``5.audio.mp4``, ``6.audio.mkv``...) arrive as
Energon's lazy :class:`megatron.energon.av.AVDecoder` (``wav``, ``flac``, ``mp3`` and the video
containers) or as the file's bytes (the extensions Energon's decoder leaves alone), wrapped here
in an ``AVDecoder``. :class:`ProcessorAudio` reads each clip's length from the container,
applies the sample's audio budget (``audio.max_seconds``: skip or clip), decodes only the kept
seconds (Energon's ``get_audio_clips``, which stops at the window's end) and converts them once,
with PyAV's resampler (FFmpeg's libswresample), to mono float32 at the feature extractor's
sampling rate: what the processor's ``audio=`` takes. A file that cannot be read is a counted
skip (reason ``audio``); a sample over its budget is one too (``audio_too_long``).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from energon_plugin_hf_processor.audio_options import AudioOptions
from energon_plugins import CountedSkip, describe_part

REASON = "audio"
"""The skip reason of an audio clip that cannot be decoded."""

TOO_LONG = "audio_too_long"
"""The skip reason of a sample whose audio is over ``audio.max_seconds``."""


class AudioDecodeError(CountedSkip):
    """An audio part cannot be decoded (corrupt, truncated, no audio stream): a counted skip,
    reason ``audio`` (an error naming the sample and the part under ``on_error: raise``)."""

    def __init__(self, message: str) -> None:
        super().__init__(REASON, message)


class NoSoundTrack(AudioDecodeError):
    """A video container read as audio has no audio stream."""


@dataclasses.dataclass(frozen=True)
class DecodedAudio:
    """One kept audio clip.

    Attributes:
        waveform: ``(N,)`` float32 mono samples at ``sampling_rate``.
        sampling_rate: samples per second (the feature extractor's).
        seconds: the clip's full length in its file (before any clipping).
        kept_seconds: the length decoded and kept.
    """

    waveform: np.ndarray
    sampling_rate: int
    seconds: float
    kept_seconds: float


def labelled_audios(sample: Any) -> list[tuple[Any, str]]:
    """A conversation sample's audio clips, each with the file it came from (for errors)."""
    audios = list(getattr(sample, "audios", ()) or ())
    parts = list(getattr(sample, "audio_parts", ()) or ()) or [f"{i}.audio" for i in range(len(audios))]
    return [(audio, describe_part(sample, part)) for audio, part in zip(audios, parts)]


def as_av_decoder(audio: Any) -> Any:
    """``audio`` as an Energon ``AVDecoder`` (bytes are wrapped; a decoder is returned as is)."""
    from megatron.energon.av import AVDecoder

    if isinstance(audio, (bytes, bytearray, memoryview)):
        return AVDecoder(io.BytesIO(bytes(audio)))
    return audio


def audio_header(decoder: Any, name: str) -> tuple[float, int]:
    """The length in seconds and the sampling rate of the first audio stream, from the
    container (no samples decoded; in a video container, its audio track).

    Raises:
        AudioDecodeError: the file cannot be opened or has no audio stream (a video without
            an audio track: :class:`NoSoundTrack`).
    """
    try:
        decoder.suppress_warnings = True
        metadata = decoder.get_metadata(
            get_video=True,  # header fields only: tells a video without sound from a bad file
            get_video_duration=False,
            get_video_frame_count=False,
            get_video_frame_size=False,
            get_audio=True,
            get_audio_duration=True,
        )
    except Exception as exc:
        raise AudioDecodeError(f"audio {name} cannot be read: {_describe(exc)}") from exc
    if metadata.audio_sample_rate is None or metadata.audio_duration is None:
        if metadata.video_fps is not None or metadata.video_duration is not None:
            raise NoSoundTrack(
                f"audio {name} is a video without an audio track (an audio part in a video "
                "container is read from its audio stream)"
            )
        raise AudioDecodeError(f"audio {name} has no audio stream")
    return float(metadata.audio_duration), int(metadata.audio_sample_rate)


def kept_windows(seconds: Sequence[float], options: AudioOptions) -> list[float] | None:
    """The seconds kept of each clip under the budget, or ``None`` when the sample is over it
    (``over_budget: skip``, or ``clip`` with a clip that would keep nothing)."""
    budget = options.max_seconds
    if budget is None or sum(seconds) <= budget:
        return list(seconds)
    if options.over_budget == "skip":
        return None
    kept, left = [], budget
    for length in seconds:
        if left <= 0:
            return None
        kept.append(min(length, left))
        left -= kept[-1]
    return kept


def to_mono_float(clip: np.ndarray) -> np.ndarray:
    """A ``(channels, samples)`` clip as float32 in [-1, 1] (integer samples are scaled)."""
    if np.issubdtype(clip.dtype, np.integer):
        info = np.iinfo(clip.dtype)
        scale = float(-info.min) if info.min < 0 else float(info.max + 1) / 2
        offset = 0.0 if info.min < 0 else 1.0
        return np.ascontiguousarray(clip.astype(np.float32) / scale - offset)
    return np.ascontiguousarray(clip.astype(np.float32, copy=False))


def resample(clip: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``(channels, samples)`` float32 at ``rate`` as ``(N,)`` mono float32 at ``target``, in
    one libswresample pass (PyAV's ``AudioResampler``: down-mix and rate change together)."""
    import av

    channels = clip.shape[0]
    if channels == 1 and rate == target:
        return clip[0].copy()
    frame = av.AudioFrame.from_ndarray(clip, format="fltp", layout="mono" if channels == 1 else "stereo")
    if channels > 2:
        frame = av.AudioFrame.from_ndarray(clip.mean(axis=0, keepdims=True), format="fltp", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="flt", layout="mono", rate=target)
    out = [f.to_ndarray().reshape(-1) for f in (*resampler.resample(frame), *resampler.resample(None))]
    return np.concatenate(out).astype(np.float32, copy=False) if out else np.zeros(0, np.float32)


def decode_audio(
    audio: Any, name: str, sampling_rate: int, seconds: float | None = None, rate: int | None = None
) -> np.ndarray:
    """The first ``seconds`` (all: ``None``) of an audio clip, as mono float32 at
    ``sampling_rate``; only that window is decoded. ``rate``, the clip's own sampling rate when
    :func:`audio_header` has read it, saves opening the container once more.

    Raises:
        AudioDecodeError: the file cannot be decoded, or decodes to nothing.
    """
    decoder = as_av_decoder(audio)
    window = (0.0, float("inf") if seconds is None else float(seconds))
    try:
        decoder.suppress_warnings = True
        if rate is None:
            rate = decoder.get_audio_samples_per_second()
        clips, _ = decoder.get_audio_clips([window], audio_unit="seconds")
    except Exception as exc:
        raise AudioDecodeError(f"audio {name} cannot be decoded: {_describe(exc)}") from exc
    if not clips or clips[0].shape[-1] == 0:
        raise AudioDecodeError(f"audio {name} decodes to no samples")
    return resample(to_mono_float(clips[0].numpy()), int(rate), sampling_rate)


class ProcessorAudio:
    """A processor's audio side, as the encoder uses it.

    Args:
        processor: the transformers processor (its ``feature_extractor``, or
            ``audio_processor`` as Phi-4-multimodal names it, may be missing).
        options: the encoder's ``audio`` options.

    Attributes:
        feature_extractor: the processor's feature extractor, or ``None``.
        sampling_rate: the rate the feature extractor takes (clips are resampled to it).
        window_seconds: the longest audio the processor reads: its ``max_audio_len`` when it
            cuts long audio into windows itself (GLM-ASR, Audio Flamingo 3: 600 s and more),
            else the feature extractor's window (Whisper: 30 s), or ``None``; nothing past it
            is decoded.
    """

    def __init__(self, processor: Any, options: AudioOptions) -> None:
        self.processor = processor
        self.options = options
        self.feature_extractor = getattr(processor, "feature_extractor", None) or getattr(
            processor, "audio_processor", None
        )
        fe = self.feature_extractor
        self.sampling_rate = int(getattr(fe, "sampling_rate", 16000) or 16000)
        n_samples = getattr(fe, "n_samples", None)
        self.window_seconds = float(n_samples) / self.sampling_rate if n_samples else None
        longest = getattr(processor, "max_audio_len", None)  # seconds, over several windows
        if isinstance(longest, (int, float)) and not isinstance(longest, bool) and longest > 0:
            self.window_seconds = float(longest)

    @property
    def available(self) -> bool:
        """Whether the processor takes audio (it has a feature extractor)."""
        return self.feature_extractor is not None

    def decode(self, sample: Any, audios: Sequence[tuple[Any, str]]) -> list[DecodedAudio]:
        """The kept audio of a sample's clips, under the budget.

        Raises:
            AudioDecodeError: a clip cannot be read or decoded.
            CountedSkip: the processor takes no audio (``audio``), or the sample is over
                ``audio.max_seconds`` (``audio_too_long``).
        """
        key = getattr(sample, "__key__", None)
        if not self.available:
            raise CountedSkip(
                REASON,
                f"sample {key!r} has {len(audios)} audio clip(s); {type(self.processor).__name__} "
                "takes no audio (no feature extractor)",
            )
        return self.decode_opened(sample, [(as_av_decoder(audio), name) for audio, name in audios])

    def decode_opened(
        self,
        sample: Any,
        decoders: Sequence[tuple[Any, str]],
        headers: Sequence[tuple[float, int]] | None = None,
    ) -> list[DecodedAudio]:
        """:meth:`decode` of ``(AVDecoder, part name)`` clips, their :func:`audio_header`
        already read where ``headers`` is given (the budget, the window, one decode each).

        Raises:
            AudioDecodeError: a clip cannot be read or decoded.
            CountedSkip: the sample is over ``audio.max_seconds`` (``audio_too_long``).
        """
        if headers is None:
            headers = [audio_header(decoder, name) for decoder, name in decoders]
        lengths = [length for length, _ in headers]
        kept = kept_windows(lengths, self.options)
        if kept is None:
            raise CountedSkip(
                TOO_LONG,
                f"sample {getattr(sample, '__key__', None)!r}: {sum(lengths):.2f} s of audio > "
                f"audio.max_seconds {self.options.max_seconds}",
            )
        decoded = []
        for (decoder, name), (length, rate), keep in zip(decoders, headers, kept):
            window = keep if keep < length else None
            if self.window_seconds is not None and (window or length) > self.window_seconds:
                window = self.window_seconds
            waveform = decode_audio(decoder, name, self.sampling_rate, window, rate)
            decoded.append(DecodedAudio(waveform, self.sampling_rate, length, window or length))
        return decoded

    def call_kwargs(self) -> dict[str, Any]:
        """The ``audio_kwargs`` of a processor call (the clips' sampling rate)."""
        return {"sampling_rate": self.sampling_rate}


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
