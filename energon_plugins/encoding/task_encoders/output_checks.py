"""The task encoder's checks of plugin outputs, where each first appears in the pipeline.

:class:`OutputChecksMixin` (a base of :class:`~energon_plugins.PluginTaskEncoder`) checks what
its plugins hand it with the predicates of :mod:`energon_plugins.encoding.plugin_outputs`:

- ``encode_sample``'s result (:meth:`~OutputChecksMixin.check_encoded_sample`): what ``batch``
  and packing read (``input_ids``, ``labels``, ``loss_mask`` 1-D tensors of one length, within
  ``seq_length`` unless the loader packs);
- the image processor's result (:meth:`~OutputChecksMixin.check_image_output`): a
  ``pixel_values`` tensor on every call (a key lookup and a type test), and on the first call
  finite values and an ``image_grid_thw`` that matches them.

The full checks run on the first output of each loader (:meth:`reset_output_checks` runs when
Energon builds a loader's pipeline, in ``build_batch``), so they cost nothing per sample after
that. A broken output raises :class:`~energon_plugins.encoding.plugin_outputs.
FatalPluginOutputError` naming the plugin (``task_encoder 'x' (energon-plugin-x)``): Energon
stops the loader at once rather than skipping the sample as bad data, also with worker
processes.
"""

from typing import Any

import torch

from energon_plugins.encoding.plugin_outputs import (
    FatalPluginOutputError,
    encoded_sample_problem,
    image_output_problem,
    output_field,
)
from energon_plugins.host.provenance import plugin_label

ENCODED_SAMPLE = "encode_sample"
IMAGE_OUTPUT = "image_processor"


class OutputChecksMixin:
    """Checks of ``encode_sample``'s results and of the image processor's outputs.

    Uses the encoder's ``seq_length``, ``packing`` and ``image_processor``. What was checked in
    this process is kept in the instance's ``_outputs_checked`` (a worker process has its own).
    """

    seq_length: int
    packing: Any
    image_processor: Any

    def reset_output_checks(self, *, packs: bool | None = None) -> None:
        """Check the next outputs of each kind again, in full (the first of a new loader).

        ``packs``: whether that loader packs (an over-long sample is then the packing
        strategy's to handle); ``None`` keeps what is known.
        """
        self.__dict__["_outputs_checked"] = set()
        if packs is not None:
            self.__dict__["_packs"] = packs

    def _checked(self) -> set[str]:
        checked = self.__dict__.get("_outputs_checked")
        if checked is None:
            checked = self.__dict__["_outputs_checked"] = set()
        return checked

    @property
    def plugin_label(self) -> str:
        """How messages name this encoder: ``task_encoder 'name' (distribution)``."""
        return plugin_label(self, "task_encoder")

    def check_encoded_sample(self, sample: Any, encoded: Any) -> None:
        """Check ``encode_sample``'s result ``encoded`` for ``sample`` (the first of each loader).

        Raises:
            FatalPluginOutputError: naming the task encoder, the sample and what is wrong.
        """
        checked = self._checked()
        if ENCODED_SAMPLE in checked:
            return
        packs = self.__dict__.get("_packs", self.packing is not None)
        problem = encoded_sample_problem(encoded, max_length=None if packs else int(self.seq_length))
        if problem is not None:
            rule, detail = problem
            key = getattr(sample, "__key__", None)
            if key is None and isinstance(sample, dict):
                key = sample.get("__key__")
            if rule == "sample-type":
                text = f"encode_sample returned {detail} for sample {key!r}"
            else:
                limit = "" if packs else f", at most seq_length {self.seq_length}"
                text = (
                    f"encode_sample's result for sample {key!r} cannot be batched: {detail} "
                    f"(input_ids, labels and loss_mask must be 1-D tensors of one length{limit})"
                )
            raise FatalPluginOutputError(f"{self.plugin_label}: {text}")
        checked.add(ENCODED_SAMPLE)

    def check_image_output(self, output: Any, count: int) -> torch.Tensor:
        """The ``pixel_values`` of the image processor's ``output`` for ``count`` images,
        checked (in full on the first call of each loader).

        Raises:
            FatalPluginOutputError: naming the image processor's plugin and what is wrong.
        """
        checked = self._checked()
        first = IMAGE_OUTPUT not in checked
        problem = image_output_problem(output, count, values=first)
        if problem is not None:
            raise FatalPluginOutputError(
                f"{plugin_label(self.image_processor, 'image_processor')} returned a result "
                f"{self.plugin_label} cannot use for {count} image(s): {problem[1]}; expected a "
                "mapping with a pixel_values tensor (N, C, H, W), or patches described by "
                "image_grid_thw (N, 3)"
            )
        if first:
            checked.add(IMAGE_OUTPUT)
        return output_field(output, "pixel_values")
