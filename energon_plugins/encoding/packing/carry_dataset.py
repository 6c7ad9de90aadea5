"""A savable Energon packing stage with carry-over (used in place of Energon's ``PackingDataset``).

Energon's ``PackingDataset`` packs each buffer on its own and discards what its pre-packer
leaves out; it has no way to push samples back. :class:`CarryOverPackingDataset` fills a
buffer with ``buffer_size`` fresh samples plus the samples carried from the previous buffer,
asks a *planner* which groups to emit now and which samples to carry, emits the groups one
pack at a time, and keeps the carried samples for the next buffer. At the end of a finite
stream the planner is told to flush, so every sample is emitted exactly once (or dropped by
the planner, which counts it).

Everything it holds is savable as restore keys, like ``PackingDataset``: the carried samples
(``_reading_buffer``) and their carry counts, the planned samples not yet emitted
(``_pending_buffer`` and ``_pending_sizes``), and the sample indices of the planner and the
final packer. Restoring re-reads the samples through the wrapped dataset's
``restore_sample``, so the final packer must be stateless (``@stateless``).
"""

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from megatron.energon.errors import ErrorContext, handle_restore_errors
from megatron.energon.flavors.base_dataset import SavableDataset, set_sample_restore_key
from megatron.energon.worker import WorkerConfig
from megatron.energon.wrappers.base import BaseWrapperDataset, SampleIndex
from megatron.energon.wrappers.buffer import SavableSampleBuffer

__all__ = ["CarryOverPackingDataset", "Planner"]

T_sample = TypeVar("T_sample")
T_pack = TypeVar("T_pack")

Planner = Callable[[list[Any], list[int], bool], tuple[list[list[int]], list[int]]]
"""``planner(samples, carry_counts, flush) -> (groups, carried)``.

``samples`` is the buffer (carried samples first, then fresh ones), ``carry_counts[i]`` how
often sample ``i`` was carried already, ``flush`` whether the stream has ended (then nothing
may be carried). ``groups`` are lists of buffer indices to emit, in order; ``carried`` the
indices to keep. An index in neither was dropped (the planner counts it)."""


class CarryOverPackingDataset(BaseWrapperDataset[T_sample, T_pack], Generic[T_sample, T_pack]):
    """Pack a stream buffer by buffer, carrying the samples of under-filled packs forward.

    Args:
        dataset: the encoded samples (each with a restore key).
        buffer_size: fresh samples per buffer (carried samples come on top).
        planner: see :data:`Planner`.
        final_packer: ``final_packer(samples) -> pack`` (the task encoder's
            ``pack_selected_samples``); must be stateless for restore.
        final_packer_stateless: whether ``final_packer`` is marked ``@stateless``.
        worker_config: Energon's worker configuration.
        final_packer_failure_tolerance: consecutive final-packer failures before a fatal
            error (0: never).
        planner_failure_tolerance: consecutive buffers for which the planner emits nothing
            before a ``RuntimeError`` (0: never).
    """

    _savable_fields = (
        "_reading_buffer",
        "_carry_counts",
        "_pending_buffer",
        "_pending_sizes",
        "_plan_sample_index",
        "_pack_sample_index",
    )

    def __init__(
        self,
        dataset: SavableDataset[T_sample],
        *,
        buffer_size: int,
        planner: Planner,
        final_packer: Callable[[list[T_sample]], T_pack],
        final_packer_stateless: bool,
        worker_config: WorkerConfig,
        final_packer_failure_tolerance: int = 100,
        planner_failure_tolerance: int = 100,
    ) -> None:
        super().__init__(dataset, worker_config=worker_config)
        if buffer_size < 1:
            raise ValueError(f"CarryOverPackingDataset: buffer_size must be >= 1, got {buffer_size}")
        self.buffer_size = buffer_size
        self.planner = planner
        self.final_packer = final_packer
        self.final_packer_stateless = final_packer_stateless
        self.planner_failure_tolerance = planner_failure_tolerance
        self._final_pack_errors = ErrorContext(
            name=f"CarryOverPackingDataset.{final_packer}",
            handler=worker_config.global_error_handler,
            tolerance=final_packer_failure_tolerance,
        )
        self.reset_state_own()

    def reset_state_own(self) -> None:
        """Empty buffers and fresh sample indices."""
        self._reading_buffer = SavableSampleBuffer(self.dataset, worker_config=self.worker_config)
        self._carry_counts: list[int] = []
        self._pending_buffer = SavableSampleBuffer(self.dataset, worker_config=self.worker_config)
        self._pending_sizes: list[int] = []
        self._plan_sample_index = SampleIndex(self.worker_config, src=self)
        self._pack_sample_index = SampleIndex(self.worker_config, src=self)

    def len_worker(self, worker_idx: int | None = None) -> int:
        """The source's length (the number of packs is not known in advance)."""
        return self.dataset.len_worker(worker_idx)

    # ------------------------------------------------------------------ iteration
    def _fill(self, source: Iterator[T_sample]) -> bool:
        """Read fresh samples until the buffer holds ``buffer_size`` of them; False at the end."""
        fresh = sum(1 for count in self._carry_counts if count == 0)
        while fresh < self.buffer_size:
            try:
                sample = next(source)
            except StopIteration:
                return False
            self._reading_buffer.append(sample)
            self._carry_counts.append(0)
            fresh += 1
        return True

    def _plan(self, flush: bool) -> None:
        """Plan the reading buffer: groups go to the pending buffer, carried samples stay."""
        samples = list(self._reading_buffer.buffer)
        keys = list(self._reading_buffer.restore_key())
        counts = list(self._carry_counts)
        with self._plan_sample_index.ctx():
            groups, carried = self.planner(samples, counts, flush)
        _check_plan(groups, carried, len(samples), flush)
        for group in groups:
            if group:
                self._pending_buffer.extend([samples[i] for i in group], [keys[i] for i in group])
                self._pending_sizes.append(len(group))
        self._reading_buffer.clear()
        self._reading_buffer.extend([samples[i] for i in carried], [keys[i] for i in carried])
        self._carry_counts = [counts[i] + 1 for i in carried]

    def _emit_next(self) -> Iterator[T_pack]:
        """Pack and yield the first pending group (nothing if the final packer fails)."""
        size = self._pending_sizes[0]
        samples = list(self._pending_buffer.buffer[:size])
        keys = tuple(self._pending_buffer.restore_key()[:size])
        del self._pending_buffer[:size]
        del self._pending_sizes[0]
        with self._final_pack_errors.handle_errors(samples):
            with self._pack_sample_index.ctx() as pack_idx:
                pack = self.final_packer(samples)
            self._final_pack_errors.reset()
            yield set_sample_restore_key(pack, pack_idx, *keys, src=self)

    def __iter__(self) -> Iterator[T_pack]:
        source = iter(self.dataset)
        self._reading_buffer.worker_start()
        self._pending_buffer.worker_start()
        if len(self._carry_counts) != self._reading_buffer.len_worker():
            raise RuntimeError(
                "CarryOverPackingDataset: restored carry counts do not match the carried samples "
                f"({len(self._carry_counts)} counts, {self._reading_buffer.len_worker()} samples)"
            )
        empty_rounds = 0
        while True:
            if self._pending_sizes:
                yield from self._emit_next()
                continue
            more = self._fill(source)
            if not more and self._reading_buffer.len_worker() == 0:
                return
            self._plan(flush=not more)
            if self._pending_sizes:
                empty_rounds = 0
            elif more:
                empty_rounds += 1
                if self.planner_failure_tolerance and empty_rounds > self.planner_failure_tolerance:
                    raise RuntimeError(
                        f"CarryOverPackingDataset: the planner {self.planner} emitted no pack for "
                        f"{empty_rounds} buffers in a row"
                    )
            if not more:
                # The stream ended: the flush emitted (or dropped) everything.
                while self._pending_sizes:
                    yield from self._emit_next()
                if self._reading_buffer.len_worker():
                    raise RuntimeError(
                        "CarryOverPackingDataset: the planner carried samples on the final flush"
                    )
                return

    # ------------------------------------------------------------------ restore
    def can_restore_sample(self) -> bool:
        """Packs can be restored from their keys when the final packer is stateless."""
        return super().can_restore_sample() and self.final_packer_stateless

    def assert_can_restore(self) -> None:
        """Fail unless packs can be restored from their keys."""
        assert self.final_packer_stateless, (
            f"final packer {self.final_packer} must be @stateless to restore packs"
        )
        super().assert_can_restore()

    def restore_sample(self, restore_key: Any) -> T_pack:
        """Rebuild a pack from its restore key (re-reads its samples, re-runs the packer)."""
        self.assert_can_restore()
        name, pack_idx, *keys = restore_key
        assert name == type(self).__name__, f"restore key of {name}, not {type(self).__name__}"
        samples = [self.restore_member(key) for key in keys]
        with handle_restore_errors(self.worker_config.restore_error_handler, samples):
            with self._pack_sample_index.ctx(pack_idx):
                pack = self.final_packer(samples)
            return set_sample_restore_key(pack, pack_idx, *keys, src=self)

    def restore_member(self, restore_key: Any) -> T_sample:
        """One sample of a pack, from its restore key (re-read through the wrapped dataset)."""
        return self.dataset.restore_sample(restore_key)

    def config(self) -> dict[str, Any]:
        """The configuration Energon compares on restore."""
        return {
            "type": type(self).__qualname__,
            "buffer_size": self.buffer_size,
            "planner": self._function_config(self.planner),
            "final_packer": self._function_config(self.final_packer),
            "final_packer_stateless": self.final_packer_stateless,
            "worker_config": self.worker_config.config(),
            "dataset": self.dataset.config(),
        }

    def __str__(self) -> str:
        return (
            f"CarryOverPackingDataset(buffer_size={self.buffer_size}, planner={self.planner}, "
            f"final_packer={self.final_packer}, dataset={self.dataset})"
        )


def _check_plan(groups: Sequence[Sequence[int]], carried: Sequence[int], n: int, flush: bool) -> None:
    """Every buffer index at most once across ``groups`` and ``carried``; none carried on flush."""
    seen: set[int] = set()
    for index in [i for g in groups for i in g] + list(carried):
        if not 0 <= index < n or index in seen:
            raise ValueError(
                f"carry-over planner: index {index} is out of range or used twice (buffer of {n} samples)"
            )
        seen.add(index)
    if flush and carried:
        raise ValueError("carry-over planner: carried samples on the final flush")
