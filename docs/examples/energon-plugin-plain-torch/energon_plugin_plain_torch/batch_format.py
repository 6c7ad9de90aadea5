"""The ``plain-torch`` format: next-token labels and the count of loss tokens per batch."""

from energon_plugin_plain_torch.options import PlainTorchOptions
from energon_plugins import BatchFormat
from energon_plugins.encoding.batch_formats.labels import IGNORE_INDEX, next_token


class PlainTorchFormat(BatchFormat):
    """``{input_ids, position_ids, labels, num_loss_tokens[, pixel_values]}``, a plain dict.

    ``labels[i]`` is the token the model should predict at position ``i`` (the next one), or
    ``ignore_index``; never across a packed sub-sequence (``position_ids`` restart at 0 in
    each, so an attention mask built from them keeps the sub-sequences apart).
    """

    name = "plain-torch"

    def format(self, batch):
        """The loop's dict for one collated batch (a MultiModalBatch)."""
        labels, _ = next_token(batch, self.ignore_index)
        if self.options.ignore_index != IGNORE_INDEX:
            labels[labels == IGNORE_INDEX] = self.options.ignore_index
        out = {
            "input_ids": batch.input_ids,
            "position_ids": batch.position_ids,
            "labels": labels,
            "num_loss_tokens": (labels != self.options.ignore_index).sum(),
        }
        if self.options.images and batch.pixel_values is not None:
            out["pixel_values"] = batch.pixel_values
        return out


def build_plain_torch(options: PlainTorchOptions, context) -> PlainTorchFormat:
    """Factory: ``factory(options, context) -> fmt``; ``context`` gives the ignore index."""
    return PlainTorchFormat(context, options)
