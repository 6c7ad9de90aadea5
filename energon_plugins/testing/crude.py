"""Hand-written crude datasets (images, videos, audio and GPT-style conversations) and their images.

:func:`write_crude_dataset` writes webdataset shards of samples you describe (images, video
and audio files and GPT-style conversations), indexes them with Energon's own prepare API and marks them as a
``CrudeWebdataset`` with ``subflavors: {format: ...}``, like ``energon_plugins.synthetic``
does for its crude kinds; use it for samples the demo generator does not write (for example
image tags that disagree with the images). :func:`read_images` reads a sample's original
images back from the shards.
"""

import contextlib
import io
import json
import pathlib
import tarfile
from collections.abc import Sequence
from typing import Any


def png_bytes(image: Any) -> bytes:
    """Encode a PIL image as PNG."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_crude_dataset(
    path: Any,
    samples: Sequence[tuple[Any, ...]],
    *,
    fmt: str,
    image_names: str = "numbered",
    samples_per_shard: int = 4,
    split_ratio: Sequence[tuple[str, float]] = (("train", 0.5), ("val", 0.5)),
) -> list[pathlib.Path]:
    """Write ``(key, images, conversations[, videos[, audios]])`` samples as a prepared crude dataset.

    Args:
        path: the dataset directory (created).
        samples: keys must be unique; images are PIL images; conversations are
            ``[{"from": ..., "value": ...}, ...]``; videos (optional) are encoded video files,
            ``bytes`` (MP4) or ``(extension, bytes)``, written as ``0.mp4``, ``1.webm``, ...;
            audios (optional) are encoded audio files, ``bytes`` (WAV) or ``(extension,
            bytes)``, written as ``0.wav``, ``1.flac``, ...
        fmt: the ``format`` subflavor (``llava`` or ``chatml``).
        image_names: ``"single"`` names the first image ``png`` (the ``llava`` layout),
            ``"numbered"`` names them ``0.png``, ``1.png``, ... (the ``chatml`` layout).
        samples_per_shard, split_ratio: as in ``energon_plugins.synthetic.write_dataset``
            (Energon assigns whole shards to splits).

    Returns:
        The shard paths.
    """
    records = []
    for key, images, conversations, *rest in samples:
        parts: dict[str, Any] = {"__key__": key}
        for i, image in enumerate(images):
            name = "png" if image_names == "single" and i == 0 else f"{i}.png"
            parts[name] = png_bytes(image)
        for i, video in enumerate(rest[0] if rest else ()):
            ext, data = video if isinstance(video, tuple) else ("mp4", video)
            parts[f"{i}.{ext}"] = data
        for i, audio in enumerate(rest[1] if len(rest) > 1 else ()):
            ext, data = audio if isinstance(audio, tuple) else ("wav", audio)
            parts[f"{i}.{ext}"] = data
        parts["json"] = json.dumps({"conversations": conversations}).encode()
        records.append(parts)
    root = pathlib.Path(path)
    shards = write_prepared_shards(
        root, records, samples_per_shard=samples_per_shard, split_ratio=split_ratio
    )
    (root / ".nv-meta" / "dataset.yaml").write_text(
        f"__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors:\n  format: {fmt}\n"
    )
    return shards


def write_prepared_shards(
    path: Any,
    records: Sequence[dict[str, Any]],
    *,
    samples_per_shard: int = 4,
    split_ratio: Sequence[tuple[str, float]] = (("train", 1.0),),
) -> list[pathlib.Path]:
    """Write webdataset records (``{"__key__": ..., PART: bytes}``) as ``shard-NNNNNN.tar``
    files under ``path`` and index them with Energon's own prepare API (splits by shard).

    The caller writes ``.nv-meta/dataset.yaml`` (the sample type or ``CrudeWebdataset``).
    Returns the shard paths.
    """
    import webdataset as wds
    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory

    root = pathlib.Path(path)
    root.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stdout(io.StringIO()):
        with wds.ShardWriter(str(root / "shard-%06d.tar"), maxcount=samples_per_shard, verbose=0) as sink:
            for record in records:
                sink.write(record)
    shards = sorted(root.glob("shard-*.tar"))
    with contextlib.redirect_stdout(io.StringIO()):
        BaseWebdatasetFactory.prepare_dataset(
            root,
            [s.name for s in shards],
            split_parts_ratio=list(split_ratio),
            shuffle_seed=None,
            workers=1,
        )
    return shards


def read_images(shards: Sequence[Any], key: str) -> list[Any]:
    """The original images of sample ``key`` (``png``, or ``0.png``, ``1.png``, ...) as PIL RGB."""
    from PIL import Image

    found: dict[str, bytes] = {}
    for shard in shards:
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                base, _, ext = member.name.partition(".")
                if base == key and ext.endswith(("png", "jpg")):
                    image_file = tar.extractfile(member)
                    assert image_file is not None, f"{member.name} in {shard} is not a regular file"
                    found[ext] = image_file.read()
        if found:
            break
    if not found:
        raise KeyError(f"no image of sample {key!r} in {len(shards)} shard(s)")

    def order(ext: str) -> int:
        head = ext.split(".")[0]
        return int(head) if head.isdigit() else -1

    return [Image.open(io.BytesIO(found[ext])).convert("RGB") for ext in sorted(found, key=order)]
