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


@hookspec
def register_batch_formats(register: Register) -> None:
    """Register batch formats: what one training loop reads from the loader.

    A batch format factory returns a callable ``fmt(batch) -> object``. It receives the task
    encoder's collated batch (an :class:`energon_plugins.MultiModalBatch`, whose ``labels``
    are aligned with ``input_ids``) and returns what the loop reads, placing the labels as
    that loop expects them: next-token labels (label ``i`` is the target of position ``i``,
    i.e. token ``i + 1``) for Megatron models, one column wider and unshifted for
    Megatron-LM's ``get_batch``, aligned for Hugging Face models (which shift themselves);
    ``-100`` wherever the loss is off, and never across a packed sub-sequence boundary. A
    batch of another type (a user's own encoder's batch) must pass through unchanged. The
    format runs in the loader's worker processes, so what it returns must pickle. The
    factory's ``context`` is the run's :class:`energon_plugins.BuildContext`.
    """


@hookspec
def register_source_formats(register: Register) -> None:
    """Register source formats: readers of the data layouts the convert verb turns into datasets.

    A source format factory (``context`` is a default :class:`energon_plugins.BuildContext`)
    returns a reader with two methods:

    - ``scan(source: pathlib.Path) -> Iterator[tuple[str, Any]]``: every record of ``source``
      (the path the user passed: a file or a folder) as ``(location, payload)``, streaming
      (memory flat in the number of records) and in the same order on every run.
      ``location`` names the record for the report (``data.json:#12``, ``part-0.parquet:row 7``);
      ``payload`` is whatever :meth:`load` needs, small and picklable (it is sent to a
      worker process). A source that cannot be read at all raises
      ``energon_plugins.ConvertError`` naming the file.
    - ``load(payload) -> energon_plugins.SourceRecord``: the record's turns
      (``[{"role": "system" | "user" | "assistant", "content": str}, ...]``, image
      placeholders in the text) and its images as their original encoded bytes, in placeholder
      order. Runs in a worker process. A record it cannot interpret raises
      ``energon_plugins.RecordError(reason, message)`` (``malformed``, ``missing_image``, ...):
      it goes to the report, never silently away. ``energon_plugins.convert.formats``
      (``normalize_turns``, ``read_image_file``) has the helpers the built-ins use.

    The converter then checks every record the same way whatever its format (images
    decodable, one placeholder per image, roles alternating, no empty answer) and writes it.
    Payloads must pickle (and the reader too, where workers are spawned rather than forked).
    """
