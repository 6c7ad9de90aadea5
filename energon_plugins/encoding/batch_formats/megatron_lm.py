"""The ``megatron-lm`` batch format: what ``examples/multimodal/train.py`` ``get_batch`` reads.

``get_batch`` broadcasts, with fixed dtypes: ``tokens`` int64, ``labels`` int64, ``imgs``
float32, ``num_tiles``, ``cu_lengths`` and ``max_lengths`` int32. It then shifts the labels
itself (``labels[:, 1:L + 1]``, so they come one column wider and unshifted), masks the
targets equal to ``-100`` or the tokenizer's pad id, treats ``imgs`` of shape ``[1, 1]`` as
"no image", and builds THD ``PackedSeqParams`` (:mod:`~energon_plugins.encoding.packed_seq`) from ``cu_lengths[0]`` / ``max_lengths[0]``
unless they are the ``[[0]]`` dummies (packing needs micro batch 1). ``LLaVAModel`` expands
each image token of ``tokens`` into that image's ``num_tiles * img_seq_len`` embeddings, so
each image takes one token here: the task encoder's run of expanded tokens is collapsed.
"""

from typing import Any

import numpy as np
import torch

from energon_plugins.encoding.batch_formats.base import BatchFormat, row_keys
from energon_plugins.encoding.batch_formats.labels import (
    IGNORE_INDEX,
    aligned_targets_array,
    loss_on_array,
    offsets_array,
    segment_starts_array,
)
from energon_plugins.encoding.batch_formats.options import MegatronLMOptions
from energon_plugins.encoding.batch_formats.sources import row_sources
from energon_plugins.encoding.samples import MultiModalBatch

#: ``visual`` keys that give the number of tiles of each image (4-D ``pixel_values`` of tiles).
TILE_COUNT_KEYS = ("num_tiles", "num_patches")


class MegatronLMFormat(BatchFormat):
    """The dict Megatron-LM's ``get_batch`` reads (see the module docstring).

    Keys (``B`` rows; ``Lc`` the longest row once each image is one token):

    - ``tokens``: int64 ``(B, Lc)``, one image token per image (:attr:`image_token_id`);
    - ``labels``: int64 ``(B, Lc + 1)``, unshifted: ``labels[i]`` is the target of token ``i``
      itself, ``-100`` where the loss is off, on image tokens and at every sub-sequence start;
      ``get_batch``'s shift makes them next-token targets;
    - ``imgs``: float32 ``(sum(num_tiles), C, H, W)``, or the ``[1, 1]`` dummy for text only;
    - ``num_tiles``: int32 ``(N,)`` tiles per image, or the ``[[0]]`` dummy;
    - ``cu_lengths``: int32 ``[1, n + 1]`` sub-sequence offsets counted in the model's
      embeddings (each image as its expanded tokens), and ``max_lengths`` int32 ``[1]``, for a
      packed batch; the ``[[0]]`` dummies otherwise;
    - ``__keys__``: the ``__key__`` of every row;
    - ``__sources__``: the source of every row (a packed row's sources joined by commas).

    Raises:
        BatchFormatError: pixel values that are not images or tiles (``(P, D)`` patches of
            Qwen-style processors), packed batches of several rows, image tokens that do not
            match the images.
    """

    name = "megatron-lm"
    tensor_keys = ("tokens", "labels", "imgs", "num_tiles", "cu_lengths", "max_lengths")

    def __init__(self, context: Any = None, options: MegatronLMOptions | None = None) -> None:
        super().__init__(context, options if options is not None else MegatronLMOptions())
        self._source_id: int | None = self.options.source_image_token_id

    # ------------------------------------------------------------------ image tokens
    @property
    def source_image_token_id(self) -> int:
        """The image token the task encoder repeated (option, else from the context)."""
        if self._source_id is None:
            from energon_plugins.encoding.chat.conversation import (
                resolve_image_token_ids,
            )
            from energon_plugins.encoding.sample_config import MultiModalSampleConfig

            config = self.context.sample_config or MultiModalSampleConfig()
            try:
                self._source_id = resolve_image_token_ids(self.context.tokenizer, config)[1]
            except Exception as exc:
                raise self.refuse(
                    f"cannot tell which token marks the images ({exc}); set the option source_image_token_id"
                ) from exc
        return self._source_id

    @property
    def image_token_id(self) -> int:
        """The token written once per image (option, else :attr:`source_image_token_id`)."""
        written = self.options.image_token_id
        return self.source_image_token_id if written is None else written

    # ------------------------------------------------------------------ the batch
    def format(self, batch: MultiModalBatch) -> dict[str, Any]:
        """The ``get_batch`` dict of ``batch``."""
        rows = int(batch.input_ids.shape[0])
        packed = batch.packed_seq_params is not None
        if packed and rows != 1:
            raise self.refuse(
                f"a packed batch has {rows} rows; Megatron-LM's get_batch packs only with micro_batch_size 1"
            )
        imgs, num_tiles = self._images(batch)
        targets = aligned_targets_array(batch, loss_on_array(batch, self.ignore_index))
        targets[segment_starts_array(batch)] = IGNORE_INDEX  # no target across a boundary
        tokens, labels = self._collapse(batch, targets)
        if packed:
            laid_out = offsets_array(batch)
            assert laid_out is not None  # a packed batch has packed_seq_params
            offsets = laid_out.astype(np.int32)
            cu_lengths = torch.from_numpy(offsets.reshape(1, -1))
            max_lengths = torch.from_numpy(np.diff(offsets).max(keepdims=True))
        else:
            cu_lengths = torch.zeros((1, 1), dtype=torch.int32)
            max_lengths = torch.zeros((1, 1), dtype=torch.int32)
        return {
            "tokens": tokens,
            "labels": labels,
            "imgs": imgs,
            "num_tiles": num_tiles,
            "cu_lengths": cu_lengths,
            "max_lengths": max_lengths,
            "__keys__": row_keys(batch),
            "__sources__": row_sources(batch),
        }

    def _images(self, batch: MultiModalBatch) -> tuple[torch.Tensor, torch.Tensor]:
        pixels = batch.pixel_values
        if pixels is None or pixels.numel() == 0:
            return torch.zeros((1, 1), dtype=torch.float32), torch.zeros((1, 1), dtype=torch.int32)
        images = int(batch.num_images.sum()) if batch.num_images is not None else None
        if pixels.dim() == 5:  # (N, tiles, C, H, W)
            tiles = torch.full((pixels.shape[0],), int(pixels.shape[1]), dtype=torch.int32)
            pixels = pixels.reshape(-1, *pixels.shape[2:])
        elif pixels.dim() == 4:  # (tiles, C, H, W): one tile per image unless told otherwise
            counts = next(
                (batch.visual[k] for k in TILE_COUNT_KEYS if batch.visual and k in batch.visual),
                None,
            )
            if counts is None:
                tiles = torch.ones(int(pixels.shape[0]), dtype=torch.int32)
            else:
                tiles = torch.as_tensor(counts).reshape(-1).to(torch.int32)
                if int(tiles.sum()) != int(pixels.shape[0]):
                    raise self.refuse(
                        f"the tiles per image ({tiles.tolist()}) do not add up to the "
                        f"{int(pixels.shape[0])} tiles of pixel_values"
                    )
        else:
            raise self.refuse(
                f"pixel_values of shape {tuple(pixels.shape)} are patches, not images or tiles "
                "(N, C, H, W); Megatron-LM's LLaVAModel takes whole image tiles (Qwen-style "
                "patch encoders need a format of their own)"
            )
        if images is not None and int(tiles.shape[0]) != images:
            raise self.refuse(f"pixel_values hold {int(tiles.shape[0])} images but the rows count {images}")
        return pixels.to(torch.float32).contiguous(), tiles

    def _collapse(self, batch: MultiModalBatch, targets: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Each image's run of tokens -> one :attr:`image_token_id`; labels kept in step.

        Vectorised over the batch (in numpy: these are many small operations, each far cheaper
        there than a torch call): the image tokens' positions (row-major) are split into images
        by ``image_token_counts`` (else into maximal runs); each image keeps its first position,
        which gets :attr:`image_token_id`, and the kept positions of every row move left.
        """
        ids = batch.input_ids.to(torch.long).numpy()
        rows, width = ids.shape
        is_image = ids == self.source_image_token_id
        keep = ~is_image
        tokens = ids.copy()
        if is_image.any():
            heads = self._image_heads(batch, is_image)
            keep.reshape(-1)[heads] = True
            tokens.reshape(-1)[heads] = self.image_token_id
        column = keep.cumsum(axis=1)  # 1 + the kept position's column in the collapsed row
        out_width = int(column[:, -1].max())
        source = np.flatnonzero(keep)
        row = source // width
        col = column.reshape(-1)[source] - 1
        collapsed = np.full((rows, out_width), self.pad_token_id, dtype=np.int64)
        collapsed.reshape(-1)[row * out_width + col] = tokens.reshape(-1)[source]
        labels = np.full((rows, out_width + 1), IGNORE_INDEX, dtype=np.int64)
        labels.reshape(-1)[row * (out_width + 1) + col] = targets.reshape(-1)[source]
        return torch.from_numpy(collapsed), torch.from_numpy(labels)

    def _image_heads(self, batch: MultiModalBatch, is_image: np.ndarray) -> np.ndarray:
        """The flat position of each image's first token, checked against the batch's images."""
        rows, width = is_image.shape
        positions = np.flatnonzero(is_image)
        counts = batch.image_token_counts.numpy() if batch.image_token_counts is not None else None
        heads = None
        if counts is not None and int(counts.sum()) == len(positions):
            ends = counts.cumsum()
            heads, tails = positions[ends - counts], positions[ends - 1]
            if not ((tails - heads == counts - 1).all() and (tails // width == heads // width).all()):
                raise self.refuse(
                    f"an image's tokens are not contiguous in one row (token counts {counts.tolist()})"
                )
        elif counts is None:  # one image per maximal run
            starts = is_image.copy()
            starts[:, 1:] &= ~is_image[:, :-1]
            heads = np.flatnonzero(starts)
        expected = batch.num_images.numpy() if batch.num_images is not None else None
        found = np.bincount(heads // width, minlength=rows) if heads is not None else None
        if found is None or (expected is not None and not np.array_equal(found, expected)):
            raise self.refuse(
                f"the rows hold {expected.tolist() if expected is not None else '?'} image(s) "
                f"but {is_image.sum(axis=1).tolist()} image tokens "
                f"(id {self.source_image_token_id})"
                + (f" in {found.tolist()} run(s)" if found is not None else "")
                + (f" for token counts {counts.tolist()}" if counts is not None else "")
            )
        assert heads is not None  # found is None without heads, refused above
        return heads


def build_megatron_lm_format(options: MegatronLMOptions | None, context: Any) -> MegatronLMFormat:
    """Factory of the built-in ``megatron-lm`` format (``factory(options, context)``)."""
    return MegatronLMFormat(context, options)
