"""Index the shards with Energon's own prepare API and describe the dataset for the encoders.

``.nv-meta/dataset.yaml`` marks the dataset as crude ``chatml`` data (``CrudeWebdataset`` with
``subflavors: {format: chatml}``), which the ``multimodal``, ``llava`` and ``qwen2-vl`` task
encoders cook with :data:`energon_plugins.encoding.chat.chatml.CHATML_COOKER`. Each split is the set
of its own shards (``train-*.tar``, ``val-*.tar``, ...), given to Energon as name patterns.
"""

import contextlib
import io
import pathlib
import re

DATASET_YAML = """\
# Written by energon-plugins convert: crude conversation data that the task encoders cook
# (energon_plugins.encoding.chat.chatml). Parts per sample: json = {"conversations": [{"from",
# "value"}, ...], "id", "source"}; images 0.<ext>, 1.<ext>, ... in placeholder order.
__module__: megatron.energon
__class__: CrudeWebdataset
subflavors:
  format: chatml
"""


def prepare_energon(output: pathlib.Path, shards: dict[str, list[str]], workers: int) -> None:
    """Run ``BaseWebdatasetFactory.prepare_dataset`` on the shards; write ``dataset.yaml``.

    ``shards`` maps each split to its shard names (splits without shards are left out). It runs
    in a child process of its own process group, killed with the worker processes Energon
    starts as soon as this call ends: Ctrl-C or SIGTERM stops the indexing at once.
    """
    from energon_plugins.convert.interrupt import call_in_child

    call_in_child("indexing with Energon's prepare API", _prepare_energon, output, shards, workers)


def _prepare_energon(output: pathlib.Path, shards: dict[str, list[str]], workers: int) -> None:
    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory

    names = [name for split_names in shards.values() for name in split_names]
    patterns = [
        (split, f"^{re.escape(split)}-[0-9]+[.]tar$") for split, split_names in shards.items() if split_names
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        BaseWebdatasetFactory.prepare_dataset(
            output,
            names,
            split_parts_patterns=patterns,
            shuffle_seed=None,
            workers=max(1, min(workers, len(names), 8)),
        )
    (output / ".nv-meta" / "dataset.yaml").write_text(DATASET_YAML, encoding="utf-8")
