"""hf-processor for energon-plugins: a task encoder driven by the model's own transformers processor."""

__version__ = "0.1.0"
