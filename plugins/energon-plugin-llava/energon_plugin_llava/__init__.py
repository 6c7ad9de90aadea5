"""LLaVA-1.5 for energon-plugins: the ``llava`` task encoder and the ``llava-clip`` processor.

Select them in a datamodule config with ``task_encoder: {name: llava}`` and
``image_processor: {name: llava-clip}``. Importing this package imports nothing heavy.
"""

__version__ = "0.1.0"
