"""Fast batched torch image processors for energon-plugins: ``fast-clip`` and ``fast-siglip``.

Select them in a datamodule config with ``image_processor: {name: fast-clip, options: {...}}``.
Importing this package imports nothing heavy; torch is loaded when a processor is built.
"""

__version__ = "0.1.0"
