"""Session fixtures of the hf-processor tests: tiny processors and real Energon datasets.

Every family's processor directory is written once per session (under a temporary folder)
and loaded back through ``AutoProcessor``, as a user's model directory would be. The datasets
are real Energon datasets, prepared with Energon's own prepare API.
"""

import collections.abc
import os
import re
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import pytest
import torch

# Hand-written conversations: single image, several images, text only, several turns, a
# system turn, GPT-style and ChatML turns, list-of-parts content. Image sizes (w, h) are tiny
# and of mixed aspect ratios so that tiles, grids and padding differ between images.
CONVERSATIONS = {
    "single": (
        [(40, 60)],
        [
            {"from": "human", "value": "<image>\nWhat color is the square?"},
            {"from": "gpt", "value": "The square is red."},
        ],
    ),
    "multi": (
        [(70, 30), (30, 30)],
        [
            {"from": "human", "value": "<image>\n<image>\nWhich one is larger?"},
            {"from": "gpt", "value": "The first one."},
        ],
    ),
    "text": (
        [],
        [
            {"role": "user", "content": "Say hello."},
            {"role": "assistant", "content": "Hello."},
        ],
    ),
    "turns": (
        [(56, 44)],
        [
            {"from": "human", "value": "<image>\nHow many circles are there?"},
            {"from": "gpt", "value": "There are 3 circles."},
            {"from": "human", "value": "What color is the background?"},
            {"from": "gpt", "value": "The background is blue."},
        ],
    ),
    "system": (
        [(90, 50)],
        [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image."}]},
            {"role": "assistant", "content": "A red circle on a blue background."},
        ],
    ),
    "twotext": (
        [],
        [
            {"from": "human", "value": "One?"},
            {"from": "gpt", "value": "One."},
            {"from": "human", "value": "Two?"},
            {"from": "gpt", "value": "Two."},
        ],
    ),
}


def _make_image(size, seed):
    """A small RGB image with random pixels (PNG round-trips it exactly)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    width, height = size
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


class _BuiltOnFirstUse(collections.abc.Mapping):
    """A mapping of ``keys`` whose values ``build(key)`` makes the first time each is read."""

    def __init__(self, keys, build):
        self._keys, self._build, self._built = tuple(keys), build, {}

    def __getitem__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        if key not in self._built:
            self._built[key] = self._build(key)
        return self._built[key]

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)


@pytest.fixture(scope="session")
def processor_dirs(tmp_path_factory):
    """Family name -> a saved tiny processor directory (each family built once, when first used)."""
    from energon_plugin_hf_processor.tiny import TINY_FAMILIES, save_tiny_processor

    root = tmp_path_factory.mktemp("hf-processors")
    return _BuiltOnFirstUse(TINY_FAMILIES, lambda family: save_tiny_processor(family, root / family))


@pytest.fixture(scope="session")
def conversation_data(tmp_path_factory):
    """A crude ``chatml`` Energon dataset of :data:`CONVERSATIONS` (train split only).

    Returns ``(path, originals)`` with ``originals[key] = (images, conversation)``.
    """
    from energon_plugins.testing import write_crude_dataset

    root = tmp_path_factory.mktemp("hf-conversations")
    originals = {}
    samples = []
    for n, (key, (sizes, conversation)) in enumerate(CONVERSATIONS.items()):
        images = [_make_image(size, 100 * n + i) for i, size in enumerate(sizes)]
        originals[key] = (images, conversation)
        samples.append((key, images, conversation))
    write_crude_dataset(root, samples, fmt="chatml", samples_per_shard=2, split_ratio=(("train", 1.0),))
    return root, originals


def _datamodule(path, processor_dir, tokenizer, *, packed, seq_length=2048, **options):
    import energon_plugins

    kwargs = {}
    if packed:
        kwargs = {
            "packing": energon_plugins.create("packing_strategy", "first-fit-decreasing"),
            "packing_buffer_size": 6,
        }
    return energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tokenizer,
        None,
        seq_length=seq_length,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=None,
        task_encoder={
            "name": "hf-processor",
            "options": {"processor": str(processor_dir), "padding": "longest", **options},
        },
        batch_format=None,  # the task encoder's own batch
        **kwargs,
    )


def _batches(dm, keys):
    """Batches until every key was seen."""
    seen = set()
    loader = dm.train_dataloader()
    for _ in range(4 * len(keys)):
        batch = next(loader)
        yield batch
        seen.update(k for key in batch.__key__ for k in key.split(","))
        if seen >= set(keys):
            return
    raise AssertionError(f"keys never seen: {sorted(set(keys) - seen)}")


@pytest.fixture(scope="session")
def make_datamodule():
    """``make_datamodule(path, processor_dir, tokenizer, *, packed, seq_length=2048, **options)``:
    the real datamodule with the ``hf-processor`` encoder (batches of 2, no shuffling)."""
    return _datamodule


@pytest.fixture(scope="session")
def every_batch():
    """``every_batch(datamodule, keys)``: training batches until every key was seen."""
    return _batches


@pytest.fixture(scope="session")
def make_image():
    """``make_image((w, h), seed)``: a small RGB image with random pixels."""
    return _make_image


# ------------------------------------------------------------------ golden checks
IGNORE = -100
ROLES = {"human": "user", "gpt": "assistant"}
_MEDIA_TAG = re.compile(r"\s*(<image>|<video>)\s*")
# The empty reasoning block a thinking template writes at the start of an answer (GLM-V):
# the model writes it too, so it is labelled with the answer (from its </think> where the
# generation prompt opens it: GLM-5.3).
_EMPTY_THINK = re.compile(r"^(?:<think>)?\s*</think>\s*")


def hf_messages(conversation, images, videos=(), text_roles=()):
    """The conversation as ``apply_chat_template`` takes it, media inline in tag order; the
    content of ``text_roles`` turns (a family's ``FamilySpec.template_text_roles``) as the
    string a user hands a template that writes it as one (HunyuanOCR's answers)."""
    media = {"image": iter(images), "video": iter(videos)}
    messages = []
    for turn in conversation:
        role = ROLES.get(turn.get("from"), turn.get("from")) if "from" in turn else turn["role"]
        content = turn.get("value", turn.get("content"))
        if isinstance(content, str):
            parts = []
            pieces = _MEDIA_TAG.split(content)
            for i, piece in enumerate(pieces):
                if i % 2:
                    kind = piece[1:-1]
                    parts.append({"type": kind, kind: next(media[kind])})
                elif piece:
                    parts.append({"type": "text", "text": piece})
        else:
            parts = [
                {"type": p["type"], p["type"]: next(media[p["type"]])} if p["type"] in media else p
                for p in content
            ]
        if role in text_roles:
            parts = "".join(p["text"] for p in parts if p["type"] == "text")
        messages.append({"role": role, "content": parts})
    return messages


def answers(conversation):
    """The assistant answers of a GPT-style or ChatML conversation."""
    return [
        t.get("value", t.get("content"))
        for t in conversation
        if t.get("from") == "gpt" or t.get("role") == "assistant"
    ]


def label_runs(labels):
    """``(start, end)`` of every run of labelled positions."""
    runs, start = [], None
    for i, lab in enumerate(labels.tolist() + [IGNORE]):
        if lab != IGNORE and start is None:
            start = i
        elif lab == IGNORE and start is not None:
            runs.append((start, i))
            start = None
    return runs


def check_labels(tokenizer, reference, ids, labels, expected_answers, end_token):
    """The labelled runs decode to the answers (each with its end-of-turn token, if any)."""
    assert torch.equal(labels[labels != IGNORE], ids[labels != IGNORE])
    runs = label_runs(labels)
    assert len(runs) == len(expected_answers), (runs, expected_answers)
    # A template that ends the text with eos right after the last turn's end (Phi-4-multimodal's
    # "<|end|><|endoftext|>") closes the last answer with both.
    last_ids = reference["input_ids"][0][-2:].tolist()
    end_of_text = end_token and last_ids == tokenizer.convert_tokens_to_ids([end_token, tokenizer.eos_token])
    for n, ((a, b), answer) in enumerate(zip(runs, expected_answers)):
        text = _EMPTY_THINK.sub("", tokenizer.decode(ids[a:b]).strip())
        closing = end_token + (tokenizer.eos_token if end_of_text and n == len(runs) - 1 else "")
        assert text == (answer + closing if end_token else answer), text
    if "assistant_masks" in reference:  # generation markers: inside transformers' own mask
        mask = torch.as_tensor(reference["assistant_masks"][0]).bool()
        outside = (labels != IGNORE) & ~mask
        closing = tokenizer.convert_tokens_to_ids(end_token) if end_token else None
        assert all(int(t) == closing for t in ids[outside]), tokenizer.decode(ids[outside])
        # Left out of the mask's tokens: only whitespace the template writes after an
        # answer (a token like " USER" overlaps the marked span by its leading space).
        for t in ids[mask & (labels == IGNORE)]:
            assert tokenizer.decode([int(t)])[:1].isspace(), tokenizer.decode([int(t)])


def kept_frames(every, fps, num_frames):
    """``num_frames`` of a video's ``every`` decoded frame, picked as the encoder picks them
    (:func:`energon_plugins.frame_indices`), and the ``VideoMetadata`` the processor gets
    with them: ``(frames, metadata)``."""
    from transformers.video_utils import VideoMetadata

    from energon_plugins import frame_indices

    indices = frame_indices(len(every), num_frames)
    metadata = VideoMetadata(
        total_num_frames=len(every),
        fps=float(fps),
        width=every.shape[2],
        height=every.shape[1],
        duration=len(every) / fps,
        frames_indices=indices,
    )
    return every[indices], metadata


def checked_rows(batch, refs, tokenizer, answers_of, end_token, token_fields=()):
    """Each sample of a batch whose ``__key__`` packs keys with commas, as ``(row, key, ids,
    labels, start, end)``, once its ids equal its reference's (``refs[key]``, the processor's
    own output), its labels decode to ``answers_of(key)`` (:func:`check_labels`) and its
    ``token_fields`` equal the reference's."""
    for row, keys in enumerate(key.split(",") for key in batch.__key__):
        start = 0
        for key in keys:
            ref = refs[key]
            end = start + ref["input_ids"].shape[1]
            ids, labels = batch.input_ids[row, start:end], batch.labels[row, start:end]
            assert torch.equal(ids, ref["input_ids"][0]), key
            check_labels(tokenizer, ref, ids, labels, answers_of(key), end_token)
            for field in token_fields:
                assert torch.equal(batch.token_fields[field][row, start:end], ref[field][0].long()), field
            yield row, key, ids, labels, start, end
            start = end


def _end_of_turn() -> dict[str, str]:
    from energon_plugin_hf_processor.tiny import TINY_SPECS

    return {name: spec.end_of_turn for name, spec in TINY_SPECS.items()}


END_OF_TURN = _end_of_turn()


def taken(spec, originals):
    """The keys of ``originals`` (``key -> (images, conversation)``) that the family of
    ``spec`` encodes: all, but where it writes one image per user turn
    (``FamilySpec.image_per_user_turn``) the others are skipped and counted."""
    return {
        key
        for key, (images, conversation) in originals.items()
        if spec.image_turn_problem(hf_messages(conversation, images), len(images)) is None
    }


@pytest.fixture(scope="session")
def golden():
    """The golden tests' helpers: ``hf_messages``, ``answers``, ``check_labels``,
    ``checked_rows``, ``kept_frames``, ``END_OF_TURN``, ``taken``."""
    return types.SimpleNamespace(
        hf_messages=hf_messages,
        answers=answers,
        label_runs=label_runs,
        check_labels=check_labels,
        checked_rows=checked_rows,
        kept_frames=kept_frames,
        END_OF_TURN=END_OF_TURN,
        taken=taken,
    )


# ------------------------------------------------------------------ videos
# (key, videos as (container, frames, fps, (w, h)), images as (w, h), conversation)
VIDEO_SAMPLES = {
    "clip": (
        [("mp4", 16, 8, (32, 32))],
        [],
        [
            {"from": "human", "value": "<video>\nWhat happens?"},
            {"from": "gpt", "value": "A bar moves."},
        ],
    ),
    "clip+image": (
        [("mp4", 12, 6, (48, 32))],
        [(40, 40)],
        [
            {"from": "human", "value": "<image>\n<video>\nSame colour?"},
            {"from": "gpt", "value": "No."},
        ],
    ),
    "two-clips": (
        [("mp4", 10, 5, (32, 48)), ("webm", 8, 4, (32, 32))],
        [],
        [
            {"from": "human", "value": "<video><video>Which is longer?"},
            {"from": "gpt", "value": "The first one."},
            {"from": "human", "value": "And the second?"},
            {"from": "gpt", "value": "Two seconds."},
        ],
    ),
    "no-media": (
        [],
        [],
        [
            {"role": "user", "content": "Say hello."},
            {"role": "assistant", "content": "Hello."},
        ],
    ),
}


@pytest.fixture(scope="session")
def video_data(tmp_path_factory):
    """A crude ``chatml`` Energon dataset of :data:`VIDEO_SAMPLES` (real MP4 / WebM files).

    Returns ``(path, originals)`` with ``originals[key] = {"videos": [(bytes, frames as
    (T, H, W, 3) decoded by plain PyAV, fps)], "images": [...], "conversation": [...]}``.
    """
    from energon_plugins.testing import decode_every_frame, encode_video, video_frames, write_crude_dataset

    root = tmp_path_factory.mktemp("hf-videos")
    originals, samples = {}, []
    for n, (key, (videos, sizes, conversation)) in enumerate(VIDEO_SAMPLES.items()):
        encoded = []
        for i, (container, frames, fps, size) in enumerate(videos):
            data = encode_video(video_frames(frames, size, seed=10 * n + i), fps, container=container, gop=4)
            encoded.append((container, data, np.stack(decode_every_frame(data)), fps))
        images = [_make_image(size, 100 * n + i) for i, size in enumerate(sizes)]
        originals[key] = {"videos": encoded, "images": images, "conversation": conversation}
        samples.append((key, images, conversation, [(c, d) for c, d, _, _ in encoded]))
    write_crude_dataset(root, samples, fmt="chatml", samples_per_shard=1, split_ratio=(("train", 1.0),))
    return root, originals


VIDEO_FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "llava-onevision", "internvl", "smolvlm")
"""The tiny processors with a video processor."""
