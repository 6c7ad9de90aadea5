"""Hook specifications: what a plugin module may implement.

Each hook is handed a ``register`` callable with the signature::

    register(name, factory, *, options=None, description="", aliases=())

- ``name``: the plain name users select in a config file (``task_encoder: {name: ...}``).
- ``factory``: ``factory(options, context) -> component``, or a ``"module:attr"`` string
  naming such a callable. A string is imported only when the component is built, so listing
  plugins stays cheap (no torch, transformers or Energon import).
- ``options``: a pydantic model class for the plugin's own settings, a ``"module:attr"``
  string naming one (imported when the plugin is built, validated or shown, so listing
  plugins imports no pydantic), or ``None``.
- ``description``: one line shown by ``energon-plugins list``.
- ``aliases``: other names that resolve to this plugin.

A plugin module implements any subset of the hooks below, decorated with
``@energon_plugins.hookimpl``.
"""

from collections.abc import Callable

from energon_plugins.host._markers import hookspec

Register = Callable[..., None]


@hookspec
def register_task_encoders(register: Register) -> None:
    """Register task encoders.

    A task encoder factory returns a ``megatron.energon.TaskEncoder``; subclass
    ``energon_plugins.PluginTaskEncoder`` to get packing wired to the selected strategy.
    The factory's ``context`` (a :class:`energon_plugins.BuildContext`) carries the tokenizer,
    the image processor, the sample config, the sequence lengths, the packing strategy and the
    split (``"train"`` or ``"val"``).
    """


@hookspec
def register_image_processors(register: Register) -> None:
    """Register image processors.

    An image processor factory returns a callable used like a Hugging Face image processor:
    ``proc(images=[...], return_tensors="pt")`` returns a mapping with ``pixel_values``.
    """


@hookspec
def register_packing_strategies(register: Register) -> None:
    """Register sequence-packing strategies.

    A packing strategy factory returns an object with
    ``select(lengths, capacity) -> list[list[int]]``: groups of indices into the packing
    buffer, each group's total length at most ``capacity``, each index in at most one group.
    """
