"""The decoded audio clips ``energon-plugins preview`` draws, kept only while it asks.

A batch holds the processor's audio features, not the waveforms, so the encoder keeps what it
fed the processor (each clip decoded, resampled and clipped to the budget: :mod:`.audio`) by
sample key, once ``preview`` has called its ``keep_preview_audio()``; training never does, so
nothing is kept there. The record lives in the process that encodes: ``preview`` reads with
``num_workers: 0``, in its own process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from energon_plugin_hf_processor.audio import DecodedAudio


class PreviewAudio:
    """Mixin of a task encoder: each encoded sample's decoded clips by its ``__key__``, kept
    from :meth:`keep_preview_audio` on, and handed back per batch row by
    :meth:`preview_audios` (the two methods ``preview`` looks for)."""

    #: Sample key -> its clips in order; ``None`` while not kept (training).
    preview_clips: dict[str, list[DecodedAudio]] | None = None

    def keep_preview_audio(self) -> None:
        """From now on keep each sample's decoded clips (``preview`` calls it; this process)."""
        if self.preview_clips is None:
            self.preview_clips = {}

    def record_preview_audio(self, key: Any, clips: Sequence[DecodedAudio]) -> None:
        """Keep ``clips`` (the waveforms fed to the processor) for sample ``key``, if asked to."""
        if self.preview_clips is not None and clips:
            self.preview_clips[str(key)] = list(clips)

    def preview_audios(self, batch: Any) -> list[list[DecodedAudio]]:
        """Per row of ``batch``, the clips of its sample (a packed row: of its samples, in order,
        by its keys joined with commas); none for a sample not kept."""
        keys = batch.__key__
        keys = [keys] if isinstance(keys, str) else [str(key) for key in keys]
        kept = self.preview_clips or {}
        rows = []
        for key in keys:
            if key in kept:
                rows.append(list(kept[key]))
            else:
                rows.append([clip for part in key.split(",") for clip in kept.get(part, ())])
        return rows
