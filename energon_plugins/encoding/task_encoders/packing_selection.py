"""Packing selection: the strategy's plan over one packing buffer, checked and counted.

:class:`PackSelectionMixin` is the planning half of
:class:`~energon_plugins.encoding.task_encoders.packing.PackingMixin`:

- the packing options (the strategy's
  :class:`~energon_plugins.encoding.packing.options.PackingOptions`), the capacity
  (``seq_length``) and ``pad_to_multiple_of`` (combined with what context and sequence
  parallelism need);
- :meth:`~PackSelectionMixin.plan_buffer`: the strategy's groups, dropped and truncated
  samples; a strategy that fails stops the loader (``FatalSampleError``), one whose selection
  breaks the contract (an index twice or out of range, an empty group, a pack over the
  capacity) stops it with a
  :class:`~energon_plugins.encoding.plugin_outputs.FatalPluginOutputError` naming the
  strategy's plugin, and overlong or left-out samples are counted in ``error_counts()`` and
  logged;
- Energon's ``select_samples_to_pack`` hook, and :meth:`~PackSelectionMixin.plan_with_carry`,
  the planner of the carry-over packing stage.
"""

import collections
import logging
import math
from typing import Any

from megatron.energon.errors import FatalSampleError

from energon_plugins.encoding.packing.carry import split_carry
from energon_plugins.encoding.packing.options import PackingOptions
from energon_plugins.encoding.packing.parallel import parallel_pad_multiple
from energon_plugins.encoding.packing.rules import selection_problem
from energon_plugins.encoding.packing.vision_balanced import vision_patches
from energon_plugins.encoding.plugin_outputs import FatalPluginOutputError
from energon_plugins.encoding.samples import EncodedSample
from energon_plugins.errors import ConfigError
from energon_plugins.host.provenance import plugin_label

# The packing stage's logger keeps the name it had before the packing mixin was split.
logger = logging.getLogger("energon_plugins.encoding.task_encoders.packing")

#: Reasons under which the packing stage counts samples in ``error_counts()``.
DROPPED = "packing_overlong_dropped"
TRUNCATED = "packing_overlong_truncated"
LEFT_OUT = "packing_left_out"
"""A sample that fits but a ``select``-only strategy put in no group (Energon discards it)."""


def round_up(length: int, multiple: int) -> int:
    """``length`` rounded up to a multiple of ``multiple``."""
    return -(-length // multiple) * multiple


class PackSelectionMixin:
    """The packing options and the strategy's plan over a buffer (Energon's selection hook).

    Mixed into :class:`~energon_plugins.PluginTaskEncoder` through ``PackingMixin``; uses its
    ``packing``, ``seq_length``, ``context`` and ``_error_counts``.
    """

    packing: Any
    seq_length: int
    _error_counts: collections.Counter

    # ------------------------------------------------------------------ options
    @property
    def packing_options(self) -> Any:
        """The strategy's options (:class:`PackingOptions` defaults for a strategy without)."""
        options = getattr(self.packing, "options", None)
        return options if options is not None else PackingOptions()

    def _packing_option(self, name: str) -> Any:
        return getattr(self.packing_options, name, PackingOptions.model_fields[name].default)

    @property
    def packing_capacity(self) -> int:
        """Tokens per packed row: ``seq_length``."""
        return int(self.seq_length)

    @property
    def pad_to_multiple_of(self) -> int:
        """Each sub-sequence is padded to a multiple of this (1: no padding).

        The strategy's ``pad_to_multiple_of`` option, combined (least common multiple) with
        what the run's context and sequence parallelism need
        (:func:`~energon_plugins.encoding.packing.parallel.parallel_pad_multiple` of the build
        context's ``cp_size``, ``tp_size`` and ``sequence_parallel``).
        """
        option = int(self._packing_option("pad_to_multiple_of"))
        context = getattr(self, "context", None)
        cp_size = int(getattr(context, "cp_size", 1) or 1)
        tp_size = int(getattr(context, "tp_size", 1) or 1)
        parallel = parallel_pad_multiple(cp_size, tp_size, getattr(context, "sequence_parallel", None))
        multiple = math.lcm(max(option, 1), parallel)
        if option < 1 or self.packing_capacity % multiple:
            source = f"pad_to_multiple_of ({option})"
            if parallel > 1:
                source += (
                    f" and the context/sequence parallelism (cp_size {cp_size}, tp_size "
                    f"{tp_size}: a multiple of {parallel})"
                )
            raise ConfigError(
                f"packing.options.pad_to_multiple_of: seq_length {self.packing_capacity} must be "
                f"a multiple of {multiple}, from {source}"
            )
        return multiple

    def packing_length(self, sample: EncodedSample) -> int:
        """The tokens ``sample`` takes in a pack: its length rounded up to the pad multiple."""
        return round_up(int(sample.length), self.pad_to_multiple_of)

    def vision_patches(self, sample: EncodedSample) -> list[int]:
        """Patches of each image and video of ``sample``, for a strategy that balances vision
        work (``uses_vision_patches``, e.g. ``vision-balanced``); override for other layouts.

        Default: :func:`~energon_plugins.encoding.packing.vision_balanced.vision_patches`.
        """
        return vision_patches(sample)

    def packing_counts(self) -> dict[str, int]:
        """Packing statistics of this process: buffers, samples, packs, real tokens, carried.

        ``tokens / (packs * packing_capacity)`` is the fill ratio of the packs emitted so far.
        """
        return dict(self._packing_stats())

    def _packing_stats(self) -> collections.Counter:
        stats = self.__dict__.get("_packing_counter")
        if stats is None:
            stats = self.__dict__["_packing_counter"] = collections.Counter()
        return stats

    # ------------------------------------------------------------------ planning
    def _strategy(self) -> Any:
        if self.packing is None:
            raise ConfigError(
                "packing_buffer_size is set but no packing strategy is selected: set "
                "packing: {name: first-fit-decreasing} (or another packing_strategy) or remove "
                "packing_buffer_size"
            )
        return self.packing

    def plan_buffer(self, samples: list[EncodedSample]) -> tuple[list[list[int]], list[int], list[int]]:
        """Plan one buffer with the strategy: ``(groups, dropped, truncated)`` as indices.

        The groups are checked on every buffer (a pass over the indices, cheap beside the
        buffer's encoding): non-empty lists of indices in range, each index at most once, every
        group of several samples within the capacity. A strategy without ``plan`` (only the
        ``select`` contract) may leave an index out: it counts as dropped.

        Raises:
            FatalPluginOutputError: the strategy's selection breaks the contract (naming the
                strategy's plugin).
            FatalSampleError: the strategy raised (e.g. ``overlong: error``).
        """
        strategy = self._strategy()
        lengths = [self.packing_length(s) for s in samples]
        capacity = self.packing_capacity
        label = plugin_label(strategy, "packing_strategy")
        # Energon's packing stage logs and skips a failing pre-packer, which would lose the
        # whole buffer: a strategy error (overlong="error" included) stops the loader instead.
        try:
            if hasattr(strategy, "plan"):
                if getattr(strategy, "uses_vision_patches", False):  # e.g. vision-balanced
                    plan = strategy.plan(lengths, capacity, [self.vision_patches(s) for s in samples])
                else:
                    plan = strategy.plan(lengths, capacity)
                groups = plan.groups
                dropped, truncated = list(plan.dropped), list(plan.truncated)
            else:
                groups = strategy.select(lengths, capacity)
                dropped = truncated = []
        except Exception as exc:
            raise FatalSampleError(
                f"{label} failed on a buffer of {len(samples)} samples: {type(exc).__name__}: "
                f"{exc}" + self._overlong_text(samples, lengths)
            ) from exc
        problem = selection_problem(groups, lengths, capacity, complete=False)
        if problem is not None:
            raise FatalPluginOutputError(
                f"{label} returned a selection that breaks the packing contract for a buffer of "
                f"{len(samples)} samples (lengths {lengths[:16]}{' ...' if len(lengths) > 16 else ''}, "
                f"capacity {capacity}): {problem[1]}; select(lengths, capacity) must return "
                "non-empty groups of buffer indices, each index at most once, each group of "
                "several samples within the capacity"
            )
        groups = [list(g) for g in groups]
        if not hasattr(strategy, "plan"):
            truncated = [i for g in groups for i in g if lengths[i] > capacity]
            dropped = sorted(set(range(len(samples))) - {i for g in groups for i in g})
        self._count_overlong(samples, lengths, dropped, truncated)
        return groups, dropped, truncated

    def _overlong_text(self, samples: list[Any], lengths: list[int]) -> str:
        """``"; overlong samples (key (length)): ..."`` for a failing buffer ("" if none)."""
        capacity = self.packing_capacity
        overlong = [
            f"{getattr(samples[i], '__key__', i)!s} ({lengths[i]})"
            for i in range(len(samples))
            if lengths[i] > capacity
        ]
        return f"; overlong samples (key (length)): {', '.join(overlong)}" if overlong else ""

    def _count_overlong(
        self, samples: list[Any], lengths: list[int], dropped: list[int], truncated: list[int]
    ) -> None:
        capacity = self.packing_capacity
        left_out = [i for i in dropped if lengths[i] <= capacity]
        dropped = [i for i in dropped if lengths[i] > capacity]
        for reason, indices, what in (
            (DROPPED, dropped, "dropped"),
            (TRUNCATED, truncated, "truncated to the capacity"),
            (LEFT_OUT, left_out, "left out by the strategy"),
        ):
            if not indices:
                continue
            self._error_counts[reason] += len(indices)
            logger.warning(
                "packing: %d sample(s) %s (capacity %d): %s (totals so far: %s)",
                len(indices),
                what,
                capacity,
                ", ".join(f"{getattr(samples[i], '__key__', i)!s} ({lengths[i]})" for i in indices),
                {k: v for k, v in self._error_counts.items() if k.startswith("packing_")},
            )

    def _count_emitted(self, samples: list[Any], groups: list[list[int]]) -> None:
        stats = self._packing_stats()
        capacity = self.packing_capacity
        stats["packs"] += len(groups)
        stats["samples"] += sum(len(g) for g in groups)
        stats["tokens"] += sum(min(int(samples[i].length), capacity) for g in groups for i in g)

    def select_samples_to_pack(self, samples: list[EncodedSample]) -> list[list[EncodedSample]]:
        """Group the packing buffer with the selected strategy (each sample exactly once).

        Samples longer than the capacity follow the strategy's ``overlong`` option and are
        counted; nothing else is left out.
        """
        groups, _, _ = self.plan_buffer(samples)
        stats = self._packing_stats()
        stats["buffers"] += 1
        self._count_emitted(samples, groups)
        return [[samples[i] for i in group] for group in groups]

    def plan_with_carry(
        self, samples: list[EncodedSample], carry_counts: list[int], flush: bool
    ) -> tuple[list[list[int]], list[int]]:
        """The carry-over planner: ``(groups to emit, indices to carry)`` for one buffer.

        Plans the buffer, then holds back up to ``carry_max_groups`` packs filled below
        ``min_fill`` (:func:`~energon_plugins.encoding.packing.carry.split_carry`); samples already
        carried ``max_carries`` times are pinned and go out now. ``flush`` carries nothing.
        """
        groups, _, _ = self.plan_buffer(samples)
        stats = self._packing_stats()
        stats["buffers"] += 1
        carried: list[int] = []
        if not flush:
            lengths = [self.packing_length(s) for s in samples]
            max_carries = int(self._packing_option("max_carries"))
            pinned = [i for i, count in enumerate(carry_counts) if count >= max_carries]
            groups, carried = split_carry(
                groups,
                lengths,
                self.packing_capacity,
                min_fill=float(self._packing_option("min_fill")),
                max_groups=int(self._packing_option("carry_max_groups")),
                pinned=pinned,
            )
        stats["carried"] += len(carried)
        self._count_emitted(samples, groups)
        return groups, carried
