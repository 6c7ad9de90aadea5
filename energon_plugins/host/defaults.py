"""What each selection defaults to: a built-in, named with its distribution.

A default is written ``energon-plugins:NAME``, so it resolves to the core's built-in even when a
third-party plugin registers the same plain name (that clash is still listed as a conflict).
"""

CORE_DISTRIBUTION = "energon-plugins"
"""The distribution of the core's built-ins."""


def builtin(name: str) -> str:
    """The qualified name of the core's built-in ``name`` (``energon-plugins:NAME``)."""
    return f"{CORE_DISTRIBUTION}:{name}"


DEFAULT_BATCH_FORMAT = builtin("megatron-bridge")
"""The batch format a datamodule applies unless told otherwise: Megatron-Bridge's ``vlm_step``."""
DEFAULT_TASK_ENCODER = builtin("multimodal")
"""The task encoder a datamodule builds when none is selected."""
DEFAULT_IMAGE_PROCESSOR = builtin("hf")
"""The image processor a config builds when none is selected (transformers' CLIP processor)."""
