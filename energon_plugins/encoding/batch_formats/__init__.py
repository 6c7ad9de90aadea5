"""Batch formats: the task encoder's collated batch, turned into what a training loop reads.

- :mod:`~energon_plugins.encoding.batch_formats.bridge`: ``megatron-bridge`` (the default),
  the mapping Megatron-Bridge's ``vlm_step`` reads;
- :mod:`~energon_plugins.encoding.batch_formats.megatron_lm`: ``megatron-lm``, what
  Megatron-LM's ``examples/multimodal`` ``get_batch`` broadcasts;
- :mod:`~energon_plugins.encoding.batch_formats.hf`: ``hf``, a transformers model's ``forward``
  keyword arguments;
- :mod:`~energon_plugins.encoding.batch_formats.labels`: where the loss is, sub-sequence
  starts, and the label shifts the formats share;
- :mod:`~energon_plugins.encoding.batch_formats.base`: :class:`BatchFormat`, the base a
  plugin's own format may subclass (a batch of another type passes through unchanged).

The formats run in the loader's worker processes, right after the task encoder's
``encode_batch`` (:mod:`energon_plugins.loading.formatting`).
"""
