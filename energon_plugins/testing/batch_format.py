"""``check_batch_format``: the batch-format contract, on batches the core's own encoder makes.

Seeded random samples (text with loss spans, some starting at a sample's first token, images as
runs of an image token with pixel values) are batched by the core's ``batch`` and packed by its
packing stage (per-sub-sequence padding included), then handed to the format. Every output must
keep these rules (each named in the :class:`~energon_plugins.testing.ConformanceError` it
raises):

- the registration and options rules of :func:`~energon_plugins.testing.check_registration`
  and :func:`~energon_plugins.testing.check_options`; ``builds``;
- ``format-raises``: the format raises nothing but
  :class:`~energon_plugins.errors.BatchFormatError`, the way to refuse a batch its loop cannot
  take (a refused case is skipped; refusing every case breaks the rule);
- ``format-passthrough``: a batch of another type (a dict, a list, any object) comes back
  unchanged (the same object);
- ``format-output``: the output is what a loop can read, as the loader checks every batch
  (:func:`~energon_plugins.encoding.plugin_outputs.format_output_problem`): a mapping (or an
  object with fields), tensors at the keys loops read as tensors (``tokens``, ``input_ids``,
  ``labels``, ``loss_mask``, ``position_ids``) and at every key of the format's
  ``tensor_keys``;
- ``format-input-unchanged``: the batch handed in is not modified;
- ``format-deterministic``: the same batch gives an equal output twice;
- ``format-pickle``: the output pickles (it crosses from the loader's workers) and comes back
  equal, of the same type;
- ``format-labels`` (with ``labels``): the training examples the loop computes from the output,
  ``(context, target)`` pairs, are exactly those of the samples: every target with loss, after
  its context within its own sample, none across a sample boundary. ``labels`` names how the
  loop reads the output: ``"next-token"`` (Megatron models: ``labels[i]`` is the target of
  position ``i``; tokens in ``tokens`` or ``input_ids``; ``loss_mask`` when present; packed
  sub-sequences from ``cu_seqlens_q_padded`` / ``cu_seqlens_q`` over the flattened rows, else
  from ``position_ids`` restarting at 0), ``"aligned"`` (Hugging Face models shift inside
  ``forward``: position ``i`` predicts ``labels[i + 1]``; sub-sequences from ``position_ids``),
  or a callable ``examples(output) -> iterable of (context tuple, target)`` for another layout.
"""

import collections
import copy
import pickle
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from energon_plugins.errors import BatchFormatError
from energon_plugins.testing._common import check_and_build, fail

IGNORE = -100
IMAGE_TOKEN = 3
CAPACITY = 32

Examples = collections.Counter


def sample_batches(context: Any = None, *, seed: int = 0, count: int = 12) -> list[Any]:
    """Seeded :class:`~energon_plugins.MultiModalBatch` cases with the samples they came from:
    ``[(batch, samples)]``, unpacked (padded to the capacity and to the longest row) and
    packed (per-sub-sequence padding 1 and 4), one and two rows."""
    from energon_plugins.encoding.packing.options import FirstFitDecreasingOptions
    from energon_plugins.encoding.packing.strategies import make_first_fit_decreasing
    from energon_plugins.encoding.task_encoders.base import PluginTaskEncoder
    from energon_plugins.host.context import BuildContext

    rng = random.Random(seed)
    base = context if context is not None else BuildContext()
    cases = []
    for index in range(count):
        samples = [_random_sample(rng, f"c{index}s{k}") for k in range(rng.randint(1, 5))]
        packed = index % 2 == 1
        pad = (1, 4)[(index // 2) % 2]
        packing = make_first_fit_decreasing(FirstFitDecreasingOptions(pad_to_multiple_of=pad))
        encoder: PluginTaskEncoder[Any] = PluginTaskEncoder(
            base.replace(seq_length=CAPACITY, packing=packing),
            padding=("seq_length", "longest")[(index // 4) % 2],
        )
        rows = samples
        if packed:
            rows = [encoder.pack_selected_samples(g) for g in encoder.select_samples_to_pack(samples)]
        size = 1 + index % 3 // 2
        for first in range(0, len(rows), size):
            group = rows[first : first + size]
            used = [s for row in group for s in _parts(row, samples)]
            cases.append((encoder.batch(group), used))
    return cases


def _random_sample(rng: random.Random, key: str) -> Any:
    import torch

    from energon_plugins.encoding.samples import EncodedSample

    ids = [rng.randint(4, 59) for _ in range(rng.randint(2, 12))]
    labels = [t if rng.random() < 0.6 else IGNORE for t in ids]
    if all(lab == IGNORE for lab in labels[1:]):
        labels[-1] = ids[-1]
    places = sorted(rng.randint(0, len(ids)) for _ in range(rng.randint(0, 2)))
    counts = [rng.randint(1, 3) for _ in places]
    for at, count in reversed(list(zip(places, counts, strict=True))):  # counts in order
        ids[at:at] = [IMAGE_TOKEN] * count
        labels[at:at] = [IGNORE] * count
    label_t = torch.tensor(labels)
    return EncodedSample(
        __key__=key,
        __restore_key__=(),
        __subflavors__=None,
        __sources__=None,
        input_ids=torch.tensor(ids),
        labels=label_t,
        loss_mask=(label_t != IGNORE).float(),
        pixel_values=torch.rand(len(counts), 3, 2, 2) if counts else None,
        num_images=len(counts),
        seq_lengths=[len(ids)],
        image_token_counts=counts,
    )


def _parts(row: Any, samples: list[Any]) -> list[Any]:
    keys = getattr(row, "sub_keys", None) or [row.__key__]
    by_key = {s.__key__: s for s in samples}
    return [by_key[k] for k in keys]


def truth(samples: Iterable[Any]) -> Examples:
    """The examples ``samples`` define: ``(context, target)`` for every position with loss after
    the first, the context being the sample's tokens before it."""
    out: Examples = collections.Counter()
    for sample in samples:
        ids, labels = sample.input_ids.tolist(), sample.labels.tolist()
        for i in range(1, len(ids)):
            if labels[i] != IGNORE:
                out[(tuple(ids[:i]), labels[i])] += 1
    return out


def _get(output: Any, key: str) -> Any:
    if isinstance(output, Mapping):
        return output.get(key)
    return getattr(output, key, None)


def _rows_and_bounds(output: Any, tokens: Any) -> list[tuple[int, list[tuple[int, int]]]]:
    """``[(row, [(start, end)])]``: the sub-sequences of every row of ``tokens``."""
    import torch

    width = int(tokens.shape[1])
    offsets = _get(output, "cu_seqlens_q_padded")
    if offsets is None:
        offsets = _get(output, "cu_seqlens_q")
    if offsets is not None:
        cu = torch.as_tensor(offsets).reshape(-1).tolist()
        out: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
        for a, b in zip(cu[:-1], cu[1:], strict=True):
            out[a // width].append((a % width, (b - 1) % width + 1))
        return sorted(out.items())
    position_ids = _get(output, "position_ids")
    result = []
    for row in range(int(tokens.shape[0])):
        if position_ids is None:
            result.append((row, [(0, width)]))
            continue
        starts = (position_ids[row] == 0).nonzero().flatten().tolist() or [0]
        if starts[0] != 0:
            starts = [0, *starts]
        result.append((row, list(zip(starts, [*starts[1:], width], strict=True))))
    return result


def next_token_examples(output: Any) -> Examples:
    """The examples a Megatron loop trains on: ``labels[i]`` at position ``i`` where
    ``loss_mask`` (else the label) says the loss is on."""
    tokens = _get(output, "tokens")
    if tokens is None:
        tokens = _get(output, "input_ids")
    labels = _get(output, "labels")
    mask = _get(output, "loss_mask")
    on = (mask > 0) if mask is not None else labels != IGNORE
    out: Examples = collections.Counter()
    for row, bounds in _rows_and_bounds(output, tokens):
        for start, end in bounds:
            for p in range(start, end):
                if bool(on[row, p]):
                    out[(tuple(tokens[row, start : p + 1].tolist()), int(labels[row, p]))] += 1
    return out


def aligned_examples(output: Any) -> Examples:
    """The examples a Hugging Face model trains on: position ``i`` predicts ``labels[i + 1]``.

    Raises:
        ValueError: a target lies across a sub-sequence boundary.
    """
    tokens, labels = _get(output, "input_ids"), _get(output, "labels")
    out: Examples = collections.Counter()
    for row, bounds in _rows_and_bounds(output, tokens):
        starts = {start for start, _ in bounds[1:]}
        for start, end in bounds:
            for p in range(start, end):
                nxt = p + 1
                if nxt >= tokens.shape[1] or int(labels[row, nxt]) == IGNORE:
                    continue
                if nxt in starts:
                    raise ValueError(
                        f"row {row}: position {p} predicts the first token of the next sub-sequence"
                    )
                out[(tuple(tokens[row, start : p + 1].tolist()), int(labels[row, nxt]))] += 1
    return out


READERS: dict[str, Callable[[Any], Examples]] = {
    "next-token": next_token_examples,
    "aligned": aligned_examples,
}
"""How ``labels=`` names the way a loop reads a format's output."""


def check_batch_format(
    name: str,
    *,
    options: Mapping[str, Any] | Any = None,
    context: Any = None,
    labels: str | Callable[[Any], Iterable[tuple[tuple[int, ...], int]]] | None = None,
    seed: int = 0,
) -> Any:
    """Check that the batch format ``name`` keeps the contract; return the built format.

    Args:
        name: the registered name (or ``distribution:name``).
        options: the plugin's options to check with (``None``: defaults).
        context: the :class:`~energon_plugins.BuildContext` handed to the factory.
        labels: how the loop reads labels (see the module docstring); ``None`` skips the
            label rule.
        seed: the seed of the random samples.

    Raises:
        ConformanceError: naming the plugin and the rule it breaks.
    """
    from energon_plugins.encoding.plugin_outputs import format_output_problem
    from energon_plugins.testing.compare import batch_differences

    if isinstance(labels, str) and labels not in READERS:
        raise ValueError(f"labels must be one of {sorted(READERS)} or a callable, got {labels!r}")
    reader = READERS[labels] if isinstance(labels, str) else labels
    spec, fmt = check_and_build("batch_format", name, options, context)
    label = spec.label
    if not callable(fmt):
        fail(label, "builds", f"the factory returned {type(fmt).__qualname__}, not fmt(batch)")

    for other in ({"input_ids": [1, 2]}, [1, 2], object()):
        if fmt(other) is not other:
            fail(label, "format-passthrough", f"a {type(other).__name__} batch did not come back unchanged")

    cases = sample_batches(context, seed=seed)
    refused = 0
    for number, (batch, samples) in enumerate(cases):
        where = (
            f"case {number} ({'packed' if batch.packed_seq_params is not None else 'unpacked'}"
            f", {batch.input_ids.shape[0]} row(s))"
        )
        before = copy.deepcopy(batch)
        try:
            output = fmt(batch)
        except BatchFormatError:
            refused += 1  # a batch the loop cannot take, refused by name: allowed
            continue
        except Exception as exc:  # noqa: BLE001
            fail(
                label,
                "format-raises",
                f"{where}: the format raised {type(exc).__name__}: "
                f"{exc} (refuse a batch the loop cannot take with BatchFormatError)",
            )
        problem = format_output_problem(output, batch, getattr(fmt, "tensor_keys", ()) or ())
        if problem is not None:
            fail(label, problem[0], f"{where}: {problem[1]}")
        changed = batch_differences(batch, before)
        if changed:
            fail(label, "format-input-unchanged", f"{where}: {changed[0]}")
        twice = batch_differences(fmt(copy.deepcopy(before)), output)
        if twice:
            fail(label, "format-deterministic", f"{where}: {twice[0]}")
        try:
            back = pickle.loads(pickle.dumps(output))
        except Exception as exc:  # noqa: BLE001
            fail(label, "format-pickle", f"{where}: {type(exc).__name__}: {exc}")
        if type(back) is not type(output) or batch_differences(back, output):
            fail(label, "format-pickle", f"{where}: the output does not come back equal")
        if reader is None:
            continue
        try:
            got = collections.Counter(reader(output))
        except Exception as exc:  # noqa: BLE001
            fail(label, "format-labels", f"{where}: reading the output failed: {exc}")
        want = truth(samples)
        if got != want:
            missing, extra = want - got, got - want
            fail(
                label,
                "format-labels",
                f"{where}: {sum(missing.values())} target(s) missing, e.g. "
                f"{list(missing)[:1]}, and {sum(extra.values())} not in the samples, e.g. "
                f"{list(extra)[:1]} (context, target)",
            )
    if refused == len(cases):
        fail(label, "format-raises", f"the format refused all {refused} batches")
    return fmt
