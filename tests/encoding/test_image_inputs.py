"""Decoding chosen for the consumer, and image lengths known before the pixels are processed.

A real Energon dataset with JPEG and PNG images (RGB, grey, RGBA) is read through Energon's
loader with each decoder the task-encoder base can choose; every form converts to the same
8-bit pixels. Encoders built on the base set the decoder their image processor asks for. In the
loader, the ``multimodal`` encoder plans image tokens (and Qwen2-VL grids) from the image
headers; the finished samples equal what ``encode_sample`` gives directly.
"""

import contextlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers
from megatron.energon import SampleDecoder, WorkerConfig, get_loader, get_val_dataset
from megatron.energon.task_encoder.base import DefaultTaskEncoder, TaskEncoder
from PIL import Image

import energon_plugins
from energon_plugins.encoding.image_processors.hf import wrap_image_processor
from energon_plugins.encoding.image_processors.inputs import (
    decoder_for,
    image_height_width,
    to_pil,
    to_uint8_chw,
)
from energon_plugins.encoding.samples import PendingImagesSample
from energon_plugins.encoding.task_encoders.multimodal import MultimodalTaskEncoder
from energon_plugins.encoding.task_encoders.options import MultimodalOptions

# (format, mode, height, width)
IMAGES = [
    ("JPEG", "RGB", 301, 517),
    ("JPEG", "L", 240, 180),
    ("PNG", "RGB", 97, 143),
    ("PNG", "RGBA", 64, 300),
    ("JPEG", "RGB", 700, 420),
    ("PNG", "L", 33, 41),
]


def _encoded(rng, fmt, mode, h, w):
    array = rng.integers(0, 256, size=(h, w, 4), dtype=np.uint8)
    array[..., :3] = np.clip(array[..., :3] // 4 + np.linspace(0, 180, w)[None, :, None], 0, 255)
    image = Image.fromarray(array, "RGBA").convert(mode)
    buf = io.BytesIO()
    image.save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


@pytest.fixture(scope="module")
def mixed_dataset(tmp_path_factory):
    """A VQA dataset of JPEG and PNG images (one per sample; every part is named ``jpg``, as
    real datasets often mislabel them: decoders go by the content), prepared by Energon."""
    import webdataset as wds
    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory

    root = tmp_path_factory.mktemp("mixed")
    rng = np.random.default_rng(0)
    with contextlib.redirect_stdout(io.StringIO()):
        with wds.ShardWriter(str(root / "shard-%06d.tar"), maxcount=3, verbose=0) as sink:
            for i, (fmt, mode, h, w) in enumerate(IMAGES):
                meta = {"question": f"<image>\nWhat is in picture {i}?", "answers": ["A pattern."]}
                sink.write(
                    {
                        "__key__": f"s{i}",
                        "jpg": _encoded(rng, fmt, mode, h, w),
                        "json": json.dumps(meta).encode(),
                    }
                )
        shards = sorted(p.name for p in root.glob("*.tar"))
        BaseWebdatasetFactory.prepare_dataset(
            root, shards, split_parts_ratio=[("train", 1.0)], shuffle_seed=None, workers=1
        )
    (root / ".nv-meta" / "dataset.yaml").write_text(
        "sample_type:\n  __module__: megatron.energon\n  __class__: VQASample\n"
        "field_map:\n  image: jpg\n  context: json[question]\n"
        "  answers: json[answers]\n"
    )
    return root


def _read(path, decoder):
    class Read(DefaultTaskEncoder):
        pass

    encoder = Read()
    encoder.decoder = decoder
    dataset = get_val_dataset(
        str(path),
        split_part="train",
        batch_size=None,
        task_encoder=encoder,
        worker_config=WorkerConfig.default_worker_config(0),
    )
    return {s.__key__: s.image for s in get_loader(dataset)}


def test_every_decode_path_gives_the_same_8_bit_pixels(mixed_dataset):
    raw = _read(mixed_dataset, decoder_for(wrap_image_processor(transformers.CLIPImageProcessor())))
    pil = _read(mixed_dataset, SampleDecoder(image_decode="pil"))
    uint8 = _read(mixed_dataset, SampleDecoder(image_decode="torchrgb8"))
    floats = _read(mixed_dataset, SampleDecoder(image_decode="torchrgb"))
    assert set(raw) == {f"s{i}" for i in range(len(IMAGES))}
    for key, data in raw.items():
        assert isinstance(data, bytes)  # left encoded: the buffers hold the file
        reference = uint8[key]
        assert image_height_width(data) == tuple(reference.shape[-2:])
        for form in (data, pil[key], floats[key], reference):
            assert torch.equal(to_uint8_chw(form), reference), key
        assert np.array_equal(np.asarray(to_pil(data)), np.asarray(pil[key])), key


class _Declares:
    def __init__(self, image_input):
        self.image_input = image_input


def test_decoder_follows_the_declared_input():
    assert decoder_for(_Declares("bytes")).config()["image_decode"] == "raw"
    assert decoder_for(_Declares("uint8")).config()["image_decode"] == "torchrgb8"
    assert decoder_for(_Declares("pil")).config()["image_decode"] == "pil"
    assert decoder_for(object()) is None  # nothing declared: Energon's default decoder stays
    with pytest.raises(ValueError, match="image_input 'jpeg'"):
        decoder_for(_Declares("jpeg"))


def test_the_encoder_sets_the_decoder_its_processor_asks_for(tokenizer, clip_processor):
    def build(processor, cls=MultimodalTaskEncoder):
        ctx = energon_plugins.BuildContext(tokenizer=tokenizer, image_processor=processor, seq_length=256)
        return cls(ctx, MultimodalOptions(image_tokens=4))

    assert build(wrap_image_processor(clip_processor)).decoder.config()["image_decode"] == "raw"
    legacy = lambda images=None, **kw: {"pixel_values": torch.zeros(1, 3, 4, 4)}
    assert build(legacy).decoder is TaskEncoder.decoder  # float decode, converted back as before

    class OwnDecoder(MultimodalTaskEncoder):
        decoder = SampleDecoder(image_decode="pil")

    assert build(wrap_image_processor(clip_processor), OwnDecoder).decoder is OwnDecoder.decoder


def _encoder(tokenizer, processor, **options):
    ctx = energon_plugins.BuildContext(
        tokenizer=tokenizer, seq_length=4096, image_processor=wrap_image_processor(processor)
    )
    return MultimodalTaskEncoder(ctx, MultimodalOptions(**options))


@pytest.mark.parametrize(
    "processor, options",
    [
        (transformers.CLIPImageProcessor(crop_size={"height": 112, "width": 112}), {"patch_size": 14}),
        (transformers.Qwen2VLImageProcessor(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 64), {}),
    ],
    ids=["clip", "qwen2-vl"],
)
def test_lengths_planned_from_headers_are_exact(mixed_dataset, tokenizer, processor, options):
    """In the loader's stage the pixels wait; the finished samples equal direct encoding."""
    encoder = _encoder(tokenizer, processor, **options)
    samples = _read(mixed_dataset, encoder.decoder)
    keys = sorted(samples)
    from megatron.energon import VQASample

    inputs = [
        VQASample(
            __key__=k,
            __restore_key__=(),
            __subflavors__={},
            __sources__=(),
            image=samples[k],
            context="<image>\nWhat is it?",
            answers=["A pattern."],
        )
        for k in keys
    ]
    pending = [encoder.encode_sample_deferring(s) for s in inputs]
    assert all(isinstance(p, PendingImagesSample) and p.pixel_values is None for p in pending)
    finished, together = encoder.complete_samples(pending)
    direct = [encoder.encode_sample(s) for s in inputs]
    for done, want in zip(finished, direct):
        assert torch.equal(done.input_ids, want.input_ids)
        assert done.image_token_counts == want.image_token_counts
        assert torch.equal(done.pixel_values, want.pixel_values)
        if want.image_grid_thw is not None:
            assert torch.equal(done.image_grid_thw, want.image_grid_thw)
    assert torch.equal(together, torch.cat([w.pixel_values for w in direct]))


def test_a_wrong_plan_stops_the_loader_naming_the_sample(mixed_dataset, tokenizer):
    from megatron.energon import VQASample
    from megatron.energon.errors import FatalSampleError

    encoder = _encoder(tokenizer, transformers.CLIPImageProcessor(), patch_size=14)
    image = next(iter(_read(mixed_dataset, encoder.decoder).values()))
    sample = VQASample(
        __key__="k",
        __restore_key__=(),
        __subflavors__={},
        __sources__=(),
        image=image,
        context="<image>\nWhat?",
        answers=["A."],
    )
    pending = encoder.encode_sample_deferring(sample)
    pending.image_token_counts = [pending.image_token_counts[0] + 1]
    with pytest.raises(FatalSampleError, match="'k'.*planned"):
        encoder.complete_samples([pending])


FROZEN_HEAP_SCRIPT = """
import gc, json, sys
import energon_plugins
from energon_plugins.synthetic import build_demo_tokenizer

processor = energon_plugins.create("image_processor", "fast-clip",
                                   {"size": {"shortest_edge": 28}, "crop_size": 28})
assert processor.image_input == "bytes"
dm = energon_plugins.EnergonMultiModalDataModule(
    sys.argv[1], build_demo_tokenizer(), processor, seq_length=300, micro_batch_size=2,
    num_workers=0, shuffle_buffer_size=8)
loader = dm.train_dataloader()
built = set(sys.modules)
for _ in range(12):
    next(loader)
late = sorted(m for m in set(sys.modules) - built
              if m.split(".")[0] in ("torchvision", "sympy") or m.startswith("torch.onnx"))
unfrozen = sum(len(gc.get_objects(generation=g)) for g in range(3))
print(json.dumps({"late": late, "unfrozen": unfrozen, "frozen": gc.get_freeze_count()}))
"""


def test_decoding_modules_are_imported_before_energon_freezes_the_heap(mixed_dataset, tmp_path):
    """Energon's ``GcDataset`` freezes the heap when iteration starts and collects every 10
    batches, scanning what came after the freeze: torchvision's image IO (imported for a
    ``bytes`` processor when the loader is built) must not arrive with the first batch, or
    its ~150,000 objects are scanned by every collection (60 ms instead of under 1 ms)."""
    script = tmp_path / "frozen_heap.py"
    script.write_text(FROZEN_HEAP_SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(script), str(mixed_dataset)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["late"] == []
    assert result["frozen"] > 0  # Energon froze the heap when the iteration started
    assert result["unfrozen"] < 30_000, result  # ~150,000 with torchvision imported late
