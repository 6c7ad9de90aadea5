"""Importing third-party modules without the noise they print on machines without extras.

megatron-core warns four times that Transformer Engine and Apex are not installed, and torch's
``cpp_extension`` (which megatron-core imports) logs that no CUDA runtime is found, on every
machine without them, though nothing this package uses needs either. A normal run prints only
what the user asked for, so these imports go through :func:`import_quietly`.
"""

import contextlib
import importlib
import logging
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType

NOISE_WARNINGS = (r".*Transformer Engine and Apex are not installed.*",)
"""Warning messages (regular expressions) hidden while importing."""

NOISE_LOGGERS = ("torch.utils.cpp_extension",)
"""Loggers held at ERROR while importing."""


@contextlib.contextmanager
def quietly() -> Iterator[None]:
    """Hide :data:`NOISE_WARNINGS` and :data:`NOISE_LOGGERS` below ERROR inside the block."""
    loggers = [logging.getLogger(name) for name in NOISE_LOGGERS]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        for pattern in NOISE_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern)
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


def import_quietly(name: str) -> ModuleType:
    """``importlib.import_module(name)`` inside :func:`quietly`.

    A module already imported is returned as it is: the noise comes with the first import
    only, and :func:`quietly` is not free (setting a logger's level clears the cache of every
    logger, about 0.3 ms with transformers' loggers registered), which counted on paths that
    run per batch, such as building a packed batch's ``PackedSeqParams``.
    """
    module = sys.modules.get(name)
    if module is not None:
        return module
    with quietly():
        return importlib.import_module(name)
