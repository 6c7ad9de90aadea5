"""``check_task_encoder``: the task-encoder contract, on a real dataset and Energon's loader.

Rules (each named in the :class:`~energon_plugins.testing.ConformanceError` it raises):

- the registration and options rules of :func:`~energon_plugins.testing.check_registration`
  and :func:`~energon_plugins.testing.check_options`;
- ``builds``: the factory builds from a :class:`~energon_plugins.BuildContext`;
- ``task-encoder-type``: the component is a ``megatron.energon.TaskEncoder``;
- ``stateless``: every method Energon runs downstream of its buffers and that the encoder
  overrides (``encode_sample`` / ``preencode_sample``, ``postencode_sample``,
  ``pack_selected_samples``, ``batch``, ``encode_batch``, ``cook_crude_sample``) and every
  cooker carries Energon's ``@stateless`` marker, without which a restored loader cannot
  rebuild the samples in its buffers;
- ``encodes``: batches come out of Energon's real loader over a dataset written with
  :func:`energon_plugins.synthetic.write_dataset`, holding keys of that dataset;
- ``batch-fields``, ``batch-shapes``, ``batch-length``: ``input_ids`` and ``labels`` (and
  ``loss_mask``, ``position_ids``, 2-D ``attention_mask`` when present) are ``(B, L)``
  tensors of one shape, ``B`` the micro batch size, ``L <= seq_length``;
- ``labels-ignore-index``: labels are token ids or the ignore index, and each batch has both
  (the prompt is not trained on; the answer is); ``labels-loss-mask``: a ``loss_mask`` is
  non-zero exactly where labels are not the ignore index;
- ``resume-exact``: the loader state saved after some batches, restored into a fresh
  encoder and loader, gives the very same next batches.
"""

import contextlib
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from energon_plugins.testing._common import check_options, check_registration, fail

#: Methods Energon applies downstream of a buffer when a task encoder overrides them.
STATELESS_METHODS = (
    "encode_sample",
    "preencode_sample",
    "postencode_sample",
    "pack_selected_samples",
    "batch",
    "encode_batch",
    "cook_crude_sample",
)

DEFAULT_IGNORE_INDEX = -100


def check_task_encoder(
    name: str,
    *,
    options: Mapping[str, Any] | Any = None,
    dataset_kind: str = "vqa",
    context: Any = None,
    dataset: Any = None,
    batches_before_save: int = 3,
    batches_after_save: int = 3,
    num_workers: int = 0,
) -> Any:
    """Check that the task encoder ``name`` keeps the contract; return the built encoder.

    Args:
        name: the registered name (or ``distribution:name``).
        options: the plugin's options to check with (``None``: defaults).
        dataset_kind: the kind of dataset to write (``vqa``, ``captioning``, ``interleaved``,
            ``llava``, ``chatml``; see :func:`energon_plugins.synthetic.write_dataset`).
        context: the :class:`~energon_plugins.BuildContext` to build with; default
            :func:`~energon_plugins.testing.default_context` (generic demo tokenizer, the
            ``hf`` CLIP processor, ``seq_length=512``, ``micro_batch_size=2``). A context
            with ``packing`` set runs the loader with a packing buffer
            (``context.packing_buffer_size``, default 8).
        dataset: an existing dataset (a ``DatasetInfo`` or a path) instead of writing one.
        batches_before_save, batches_after_save: the resume check reads this many batches,
            saves the loader state, reads this many more, and compares them with a restored
            loader's.
        num_workers: Energon loader workers (0: in process, the fastest).

    Raises:
        ConformanceError: naming the plugin and the rule it breaks (see the module docstring).
    """
    from energon_plugins.host import api

    spec = check_registration("task_encoder", name)
    label = spec.label
    validated = check_options("task_encoder", name, options)
    if context is None:
        from energon_plugins.testing.context import default_context

        context = default_context()
    encoder = _build(api, spec, validated, context)

    from megatron.energon import TaskEncoder

    if not isinstance(encoder, TaskEncoder):
        fail(
            label,
            "task-encoder-type",
            f"the factory returned {type(encoder).__qualname__}, not a megatron.energon.TaskEncoder",
        )
    _check_stateless(label, encoder)

    with _dataset_path(dataset, dataset_kind) as (path, keys):
        setup = _LoaderSetup(path, context, num_workers)
        before, after, state = setup.run(encoder, label, batches_before_save, batches_after_save)
        ignore = _ignore_index(encoder, context)
        vocab = _vocab_size(context.tokenizer)
        for index, batch in enumerate(before + after):
            _check_batch(label, batch, index, context, ignore, vocab, keys)
        fresh = _build(api, spec, validated, context)
        resumed = setup.resume(fresh, label, state, len(after))
    from energon_plugins.testing.compare import batch_differences

    for index, (want, got) in enumerate(zip(after, resumed)):
        problems = batch_differences(want, got, path=f"batch[{index}]")
        if problems:
            fail(
                label,
                "resume-exact",
                f"after restoring the state saved at batch {batches_before_save}, batch "
                f"{batches_before_save + index} differs from the original run: "
                + "; ".join(problems)
                + " (a method downstream of the shuffle buffer keeps state or draws random "
                "numbers; use @stateless(restore_seeds=True) from megatron.energon for "
                "randomness)",
            )
    return encoder


def _build(api: Any, spec: Any, options: Any, context: Any) -> Any:
    try:
        return api.get_registry().create(spec.kind, spec.qualified_name, options, context)
    except Exception as exc:  # noqa: BLE001 - reported under the rule
        fail(spec.label, "builds", f"building from a BuildContext failed: {type(exc).__name__}: {exc}")


def _check_stateless(label: str, encoder: Any) -> None:
    from megatron.energon import DefaultTaskEncoder, TaskEncoder
    from megatron.energon.task_encoder.base import get_stateless

    missing = []
    for method_name in STATELESS_METHODS:
        method = getattr(encoder, method_name, None)
        if method is None:
            continue
        if not encoder._is_overridden(method, bases=(TaskEncoder, DefaultTaskEncoder)):
            continue
        if not get_stateless(method):
            missing.append(method_name)
    for index, cooker in enumerate(getattr(encoder, "cookers", None) or ()):
        cook = getattr(cooker, "cook", None)
        if cook is not None and not get_stateless(cook):
            missing.append(f"cookers[{index}].cook ({getattr(cook, '__name__', cook)!r})")
    if missing:
        fail(
            label,
            "stateless",
            f"{', '.join(missing)} lack Energon's @stateless marker (from megatron.energon "
            "import stateless); Energon re-runs them when it restores a saved loader state, so "
            "they must be pure functions of their input (@stateless(restore_seeds=True) if "
            "they draw random numbers)",
        )


@contextlib.contextmanager
def _dataset_path(dataset: Any, kind: str) -> Iterator[tuple[Path, set[str] | None]]:
    if dataset is not None:
        path = Path(getattr(dataset, "path", dataset))
        samples = getattr(dataset, "samples", None)
        yield path, (set(samples) if samples else None)
        return
    from energon_plugins.synthetic import write_dataset

    with tempfile.TemporaryDirectory(prefix="energon-conformance-") as tmp:
        info = write_dataset(
            Path(tmp) / kind,
            kind=kind,
            num_samples=40,
            samples_per_shard=5,
            image_size=((24, 24), (48, 40)),
            seed=1,
        )
        yield info.path, set(info.samples)


class _LoaderSetup:
    """Build identical Energon train loaders over one dataset, for a run and its resume."""

    def __init__(self, path: Path, context: Any, num_workers: int) -> None:
        self.path = path
        self.context = context
        self.num_workers = num_workers
        self.batch_size = int(context.micro_batch_size)
        self.packing_buffer_size = None
        if context.packing is not None:
            self.packing_buffer_size = int(context.packing_buffer_size or 8)

    def loader(self, encoder: Any) -> Any:
        from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

        worker_config = WorkerConfig(rank=0, world_size=1, num_workers=self.num_workers)
        dataset = get_train_dataset(
            str(self.path),
            batch_size=self.batch_size,
            shuffle_buffer_size=8,
            max_samples_per_sequence=4,
            packing_buffer_size=self.packing_buffer_size,
            task_encoder=encoder,
            worker_config=worker_config,
        )
        return get_savable_loader(dataset)

    def _take(self, label: str, iterator: Iterator[Any], count: int, what: str) -> list[Any]:
        out = []
        try:
            for _ in range(count):
                out.append(next(iterator))
        except Exception as exc:  # noqa: BLE001 - reported under the rule
            fail(label, "encodes", f"{what}: Energon's loader raised {type(exc).__name__}: {exc}")
        return out

    def run(self, encoder: Any, label: str, before: int, after: int) -> tuple[list, list, Any]:
        """Read ``before`` batches, save the state, read ``after`` more."""
        with _quiet():
            try:
                loader = self.loader(encoder)
            except Exception as exc:  # noqa: BLE001
                fail(label, "encodes", f"building Energon's loader failed: {type(exc).__name__}: {exc}")
            iterator = iter(loader)
            first = self._take(label, iterator, before, "reading the first batches")
            state = loader.save_state_rank()
            second = self._take(label, iterator, after, "reading on after saving the state")
            del iterator, loader
        return first, second, state

    def resume(self, encoder: Any, label: str, state: Any, count: int) -> list[Any]:
        """Restore ``state`` into a loader around ``encoder`` and read ``count`` batches."""
        with _quiet():
            loader = self.loader(encoder)
            try:
                loader.restore_state_rank(state)
            except Exception as exc:  # noqa: BLE001
                fail(
                    label,
                    "resume-exact",
                    f"restoring the saved loader state failed: {type(exc).__name__}: {exc}",
                )
            iterator = iter(loader)
            try:
                return [next(iterator) for _ in range(count)]
            except Exception as exc:  # noqa: BLE001
                fail(
                    label,
                    "resume-exact",
                    f"reading after restoring the state failed: {type(exc).__name__}: {exc}",
                )
            finally:
                del iterator, loader
        return []  # pragma: no cover - fail() raised


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        yield


def _ignore_index(encoder: Any, context: Any) -> int:
    value = getattr(encoder, "ignore_index", None)
    if isinstance(value, int):
        return value
    sample_config = getattr(context, "sample_config", None)
    value = getattr(sample_config, "ignore_index", None)
    return value if isinstance(value, int) else DEFAULT_IGNORE_INDEX


def _vocab_size(tokenizer: Any) -> int | None:
    try:
        return int(len(tokenizer))
    except Exception:  # noqa: BLE001 - a tokenizer without len: skip the upper bound
        return None


def _field(batch: Any, name: str) -> Any:
    if isinstance(batch, Mapping):
        return batch.get(name)
    return getattr(batch, name, None)


def _check_batch(
    label: str,
    batch: Any,
    index: int,
    context: Any,
    ignore: int,
    vocab: int | None,
    keys: set[str] | None,
) -> None:
    import torch

    from energon_plugins.encoding.plugin_outputs import token_tensors_problem

    where = f"batch {index}"
    input_ids = _field(batch, "input_ids")
    labels = _field(batch, "labels")
    # the rule the loader checks each encoded sample with (1-D there, (B, L) rows here)
    problem = token_tensors_problem(input_ids, labels, dims=2)
    if problem is not None:
        fail(label, f"batch-{problem[0]}", f"{where}: {problem[1]}")
    shape = tuple(input_ids.shape)
    for field_name in ("loss_mask", "position_ids", "attention_mask"):
        value = _field(batch, field_name)
        if torch.is_tensor(value) and value.dim() == 2 and tuple(value.shape) != shape:
            fail(
                label,
                "batch-shapes",
                f"{where}: {field_name} {tuple(value.shape)} and input_ids {shape} differ in shape",
            )
        if torch.is_tensor(value) and value.dim() != 2 and value.shape[0] != shape[0]:
            fail(
                label,
                "batch-shapes",
                f"{where}: {field_name} has {value.shape[0]} rows for {shape[0]} rows of input_ids",
            )
    if shape[0] != int(context.micro_batch_size):
        fail(
            label,
            "batch-shapes",
            f"{where}: {shape[0]} rows, but micro_batch_size is {context.micro_batch_size}",
        )
    if shape[1] > int(context.seq_length):
        fail(label, "batch-length", f"{where}: {shape[1]} tokens per row > seq_length {context.seq_length}")
    valid = labels != ignore
    bad = valid & (labels < 0)
    if vocab is not None:
        bad |= valid & (labels >= vocab)
    if bool(bad.any()):
        fail(
            label,
            "labels-ignore-index",
            f"{where}: labels hold {sorted(set(labels[bad].tolist()))[:5]}, neither token ids "
            f"nor the ignore index {ignore}",
        )
    if bool(valid.all()):
        fail(
            label,
            "labels-ignore-index",
            f"{where}: no label equals the ignore index {ignore} (the prompt and padding must "
            "not be trained on)",
        )
    if not bool(valid.any()):
        fail(
            label,
            "labels-ignore-index",
            f"{where}: every label is the ignore index {ignore}: nothing to train on",
        )
    loss_mask = _field(batch, "loss_mask")
    if torch.is_tensor(loss_mask) and tuple(loss_mask.shape) == shape:
        mismatch = (loss_mask != 0) != valid
        if bool(mismatch.any()):
            fail(
                label,
                "labels-loss-mask",
                f"{where}: loss_mask and labels disagree at {int(mismatch.sum())} position(s): "
                f"loss_mask must be non-zero exactly where labels != {ignore}",
            )
    pixel_values = _field(batch, "pixel_values")
    if pixel_values is not None:
        if not torch.is_tensor(pixel_values) or not pixel_values.dtype.is_floating_point:
            fail(
                label,
                "batch-fields",
                f"{where}: pixel_values must be a float tensor, got {type(pixel_values).__name__}",
            )
        if not bool(torch.isfinite(pixel_values).all()):
            fail(label, "batch-fields", f"{where}: pixel_values hold NaN or infinite values")
    batch_keys = _field(batch, "__key__")
    if keys is not None and isinstance(batch_keys, (list, tuple)):
        if len(batch_keys) != shape[0]:
            fail(label, "batch-shapes", f"{where}: {len(batch_keys)} keys for {shape[0]} rows")
        found = {part for key in batch_keys for part in str(key).split(",")}
        strangers = sorted(found - keys)
        if strangers:
            fail(label, "encodes", f"{where}: keys {strangers[:3]} are not samples of the dataset")
