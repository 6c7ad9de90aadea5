"""Audio clips in the token-level cuts of packing: ``truncation: split`` and ``overlong: truncate``.

An encoder that takes audio names its ``audio_token_id``; each run of it is one clip whose
features (``visual["input_features"]``) cannot be divided. A split never falls inside a clip,
a part holding only some of a sample's media is refused (counted ``split_media_layout``), and
a truncation that would cut a clip keeps no media at all, as for images.
"""

import pytest
import torch

from energon_plugins.encoding.packing.split_samples import (
    SplitRefused,
    media_spans,
    sample_part,
    split_points,
)
from energon_plugins.encoding.samples import EncodedSample
from energon_plugins.encoding.task_encoders.packed_rows import PackAssemblyMixin

AUDIO, IMAGE, TEXT = 7, 5, 1
IGNORE = -100


def sample(layout: list[tuple[int, int]], *, images: int = 0) -> EncodedSample:
    """A sample of ``(token, run length)`` runs with one audio feature row per clip."""
    ids = torch.tensor([token for token, n in layout for _ in range(n)], dtype=torch.int64)
    clips = sum(1 for token, _ in layout if token == AUDIO)
    return EncodedSample(
        __key__="clip",
        __restore_key__=(),
        input_ids=ids,
        labels=ids.clone(),
        loss_mask=torch.ones(len(ids)),
        pixel_values=torch.ones(images, 3) if images else None,
        num_images=images,
        image_token_counts=[n for token, n in layout if token == IMAGE] if images else None,
        visual={"input_features": torch.ones(clips, 4)},
    )


def test_audio_runs_are_spans_a_split_never_cuts():
    s = sample([(TEXT, 3), (AUDIO, 6), (TEXT, 4), (AUDIO, 5), (TEXT, 2)])
    spans = media_spans(s, None, None, AUDIO)
    assert spans == [(3, 9), (13, 18)]
    assert media_spans(s, None, None) == [], "without the audio token the clips are invisible"
    parts = split_points(s.length, spans, 8)
    assert parts == [(0, 3), (3, 13), (13, 20)] or all(
        not (a < cut < b) for a, b in spans for _, cut in parts
    )
    for start, stop in parts:
        assert not any(a < start < b or a < stop < b for a, b in spans)


def test_a_part_with_every_clip_keeps_the_features_and_one_without_keeps_none():
    s = sample([(TEXT, 3), (AUDIO, 4), (TEXT, 9)])
    first = sample_part(
        s, 0, 10, image_token_id=None, video_token_id=None, ignore_index=IGNORE, audio_token_id=AUDIO
    )
    rest = sample_part(
        s, 10, 16, image_token_id=None, video_token_id=None, ignore_index=IGNORE, audio_token_id=AUDIO
    )
    assert first.visual is not None and torch.equal(
        first.visual["input_features"], s.visual["input_features"]
    )
    assert rest.visual is None and int((rest.input_ids == AUDIO).sum()) == 0


def test_a_cut_through_a_clip_is_refused():
    s = sample([(TEXT, 3), (AUDIO, 6), (TEXT, 4)])
    with pytest.raises(SplitRefused, match="audio clip") as refused:
        sample_part(
            s, 0, 5, image_token_id=None, video_token_id=None, ignore_index=IGNORE, audio_token_id=AUDIO
        )
    assert refused.value.reason == "split_media_layout"


def test_clips_spread_over_parts_are_refused_not_misassigned():
    s = sample([(AUDIO, 4), (TEXT, 6), (AUDIO, 4), (TEXT, 2)])
    with pytest.raises(SplitRefused, match="audio clips") as refused:
        sample_part(
            s, 0, 10, image_token_id=None, video_token_id=None, ignore_index=IGNORE, audio_token_id=AUDIO
        )
    assert refused.value.reason == "split_media_layout"


class _Truncating(PackAssemblyMixin):
    image_token_id = IMAGE
    video_token_id = None

    def __init__(self, audio_token_id):
        self.audio_token_id = audio_token_id


@pytest.mark.parametrize("audio_token_id", [AUDIO, None], ids=["known", "unknown"])
def test_truncation_that_reaches_a_clip_keeps_no_media(audio_token_id):
    s = sample([(TEXT, 2), (IMAGE, 3), (TEXT, 2), (AUDIO, 6), (TEXT, 3)], images=1)
    cut = _Truncating(audio_token_id).truncate_for_packing(s, 10)
    if audio_token_id is None:  # an encoder without audio: only the image is protected
        assert cut.length == 10 and cut.num_images == 1
        return
    assert cut.length == 2, "cut before the first media token"
    assert cut.num_images == 0 and cut.visual is None and cut.pixel_values is None
    kept = _Truncating(audio_token_id).truncate_for_packing(s, 13)
    assert kept.length == 13 and kept.num_images == 1 and kept.visual is not None
