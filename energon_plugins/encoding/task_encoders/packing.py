"""Sequence packing for :class:`~energon_plugins.PluginTaskEncoder`: the packing mixin.

:class:`PackingMixin` implements Energon's packing hooks with the selected packing strategy
(``context.packing``):

- ``select_samples_to_pack(samples)`` asks the strategy for a plan over the packing buffer,
  using each sample's packed length (its length rounded up to ``pad_to_multiple_of``) and the
  capacity ``seq_length``. Every sample lands in exactly one group, except overlong samples
  under ``overlong: drop``; dropped and truncated samples are counted in
  :meth:`~energon_plugins.PluginTaskEncoder.error_counts` (``packing_overlong_dropped``,
  ``packing_overlong_truncated``; ``packing_left_out`` for a fitting sample that a
  ``select``-only strategy put in no group) and logged. A strategy that fails stops the loader
  (``FatalSampleError``); one that uses an index twice or out of range, returns an empty group
  or overfills a pack stops it with a ``FatalPluginOutputError`` naming its plugin.
- ``pack_selected_samples(samples)`` (``@stateless``) first finishes the samples' deferred work
  (``complete_samples``: the image pixels of samples whose lengths were planned from the image
  sizes, processed together into one tensor), then concatenates tokens, labels, loss masks,
  pixel values, image grids and image counts into one :class:`PackedSample` whose
  ``seq_lengths`` are the sub-sequence lengths (each padded to ``pad_to_multiple_of``) and
  ``real_seq_lengths`` the unpadded ones.
- ``finish_packed_batch(samples, batch)`` (called at the end of ``batch``) gives every batch of
  packed rows megatron-core ``PackedSeqParams(qkv_format="thd")``, with
  ``cu_seqlens_q_padded`` / ``cu_seqlens_kv_padded`` when ``pad_to_multiple_of`` > 1.
- ``build_batch``: with ``carry_over: true`` the packing stage is a
  :class:`~energon_plugins.encoding.packing.carry_dataset.CarryOverPackingDataset` instead of Energon's
  ``PackingDataset``: the least-filled pack of each buffer is carried into the next buffer.
  With the encoder option ``truncation: split`` it is a
  :class:`~energon_plugins.encoding.packing.split_dataset.SplitPackingDataset`: an over-long
  sample is cut into parts that continue in the next packs
  (:mod:`~energon_plugins.encoding.task_encoders.packing_split`); without a packing buffer
  ``truncation: split`` is refused (``ConfigError``).

The packing options (``overlong``, ``pad_to_multiple_of``, ``carry_over``, ``min_fill``,
``max_carries``, ``carry_max_groups``) live in the strategy's options
(:class:`energon_plugins.encoding.packing.options.PackingOptions`), so a config selects them with the
strategy: ``packing: {name: first-fit-decreasing, options: {carry_over: true}}``.

The selection lives in :mod:`~energon_plugins.encoding.task_encoders.packing_selection`, the
assembly of packed rows (and :class:`PackedSample`) in
:mod:`~energon_plugins.encoding.task_encoders.packed_rows`; this module wires them into
Energon's packing stage (``build_batch``).
"""

from functools import partial
from typing import TYPE_CHECKING, Any

from megatron.energon import stateless
from megatron.energon.task_encoder.base import get_failure_tolerance, get_stateless
from megatron.energon.wrappers.packing_dataset import PackingDataset

from energon_plugins._stages import replace_stage_class
from energon_plugins.encoding.packed_seq import packed_seq_params
from energon_plugins.encoding.samples import EncodedSample
from energon_plugins.encoding.task_encoders.packed_rows import PackAssemblyMixin, PackedSample
from energon_plugins.encoding.task_encoders.packing_selection import PackSelectionMixin
from energon_plugins.encoding.task_encoders.packing_split import SplitPlanningMixin
from energon_plugins.errors import ConfigError

__all__ = ["PackedSample", "PackingMixin", "packed_seq_params"]


class PackingMixin(SplitPlanningMixin, PackSelectionMixin, PackAssemblyMixin):
    """Energon's packing hooks, driven by the selected packing strategy.

    Mixed into :class:`~energon_plugins.PluginTaskEncoder` (before it in the bases); uses its
    ``packing``, ``seq_length``, ``pad_token_id``, ``ignore_index`` and ``_error_counts``.
    The selection (:class:`PackSelectionMixin`) and the assembly of packed rows
    (:class:`PackAssemblyMixin`) are its halves; this class wires them into Energon's
    packing stage.
    """

    if TYPE_CHECKING:  # what the host encoder (PluginTaskEncoder, Energon's TaskEncoder) provides
        __default_failure_tolerance__: int | None

        def reset_output_checks(self, *, packs: bool | None = None) -> None: ...

        def _is_overridden(self, bound_method: Any, bases: Any = None) -> bool: ...

        def postencode_sample(self, sample: Any) -> Any: ...

    # ------------------------------------------------------------------ the packing stage
    def build_batch(
        self,
        dataset: Any,
        *,
        batch_size: Any,
        batch_drop_last: bool = False,
        packing_buffer_size: int | None = None,
        worker_config: Any,
    ) -> Any:
        """Energon's ``build_batch``; with ``carry_over`` the packing stage carries over, with
        ``truncation: split`` it splits over-long samples across packs.

        Without packing and batching (``batch_size=None``), a last stage finishes each
        sample's deferred work (``complete_samples``), which packing or ``batch`` does otherwise.
        Each call (each loader's pipeline) checks its first outputs of the plugins anew
        (``reset_output_checks``).
        """
        unbatched = batch_size is None and packing_buffer_size is None
        # a new loader: its first sample and image output are checked in full
        self.reset_output_checks(packs=packing_buffer_size is not None)
        if packing_buffer_size is not None:
            self._strategy()
            self.pad_to_multiple_of  # noqa: B018 - validates seq_length against the multiple
        split = self.split_enabled
        if split and packing_buffer_size is None:
            raise ConfigError(
                "task_encoder.options.truncation: 'split' continues an over-long sample in the "
                "next pack, so it needs packing: set packing (a packing strategy) and "
                "packing_buffer_size, or choose truncation 'right', 'drop' or 'error'"
            )
        if packing_buffer_size is not None and (split or self._packing_option("carry_over")):
            field = "task_encoder.options.truncation" if split else "packing.options.carry_over"
            if self._is_overridden(self.postencode_sample):
                raise ConfigError(
                    f"{field}: {type(self).__name__} overrides postencode_sample, which the "
                    "carry-over and split packing stages do not support"
                )
            from energon_plugins.encoding.packing.carry_dataset import CarryOverPackingDataset
            from energon_plugins.encoding.packing.split_dataset import SplitPackingDataset

            default_tolerance = self.__default_failure_tolerance__
            stage: Any = (
                partial(SplitPackingDataset, cut=self.split_part) if split else CarryOverPackingDataset
            )
            dataset = stage(
                dataset,
                buffer_size=packing_buffer_size,
                planner=self.plan_with_split if split else self.plan_with_carry,
                final_packer=self.pack_selected_samples,
                final_packer_stateless=get_stateless(self.pack_selected_samples),
                worker_config=worker_config,
                final_packer_failure_tolerance=get_failure_tolerance(
                    self.pack_selected_samples, default_tolerance
                ),
                planner_failure_tolerance=get_failure_tolerance(
                    self.select_samples_to_pack, default_tolerance
                ),
            )
            packing_buffer_size = None
        dataset = super().build_batch(  # type: ignore[misc]  # the TaskEncoder after the mixins
            dataset,
            batch_size=batch_size,
            batch_drop_last=batch_drop_last,
            packing_buffer_size=packing_buffer_size,
            worker_config=worker_config,
        )
        # no progress bar while a worker fills its first packing buffer
        replace_stage_class(dataset, PackingDataset, QuietPackingDataset)
        if unbatched:
            from megatron.energon.wrappers import MapDataset

            dataset = MapDataset(
                dataset, self.complete_unbatched, worker_config=worker_config, stateless_map_fn=True
            )
        return dataset

    @stateless
    def complete_unbatched(self, sample: EncodedSample) -> EncodedSample:
        """One sample with its deferred work done (the last stage of an unbatched loader)."""
        return self.complete_samples([sample])[0][0]


class QuietPackingDataset(PackingDataset):
    """Energon's ``PackingDataset`` whose buffer filling never draws a progress bar."""

    def _fill_reading_buffer(self, source_iter: Any, log_progress: bool = False) -> bool:
        return super()._fill_reading_buffer(source_iter, log_progress=False)
