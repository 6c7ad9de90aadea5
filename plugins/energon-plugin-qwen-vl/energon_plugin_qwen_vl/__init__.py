"""Qwen2-VL for energon-plugins: the ``qwen2-vl`` task encoder and image processor.

Select them in a datamodule config with ``task_encoder: {name: qwen2-vl}`` and
``image_processor: {name: qwen2-vl, options: {min_pixels: ..., max_pixels: ...}}``.
Importing this package imports nothing heavy.
"""

__version__ = "0.1.0"
