"""Memory for large outputs (pixel values, packed batches): where a tensor is born decides
what it costs.

- :mod:`~energon_plugins.encoding.memory.outputs`: :func:`new_output` and
  :func:`concatenated`, what processors and collate functions call;
- :mod:`~energon_plugins.encoding.memory.pool`: reused arrays in the main process;
- :mod:`~energon_plugins.encoding.memory.shared`: reused shared-memory segments in a loader
  worker.

Importing this package imports neither torch nor numpy.
"""

from energon_plugins.encoding.memory.outputs import concatenated, new_output

__all__ = ["concatenated", "new_output"]
