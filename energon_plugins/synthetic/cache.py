"""Where generated data is kept, and the stamps that let a second call reuse it.

A writer stores its arguments and the :class:`DatasetInfo` it returned in a JSON stamp next
to the data; a later call with the same arguments reads the info back instead of writing
again, provided every shard is still there. A directory is only ever deleted when it carries
such a stamp (so the writers never remove data they did not write).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from typing import Any

from energon_plugins.synthetic.info import DatasetInfo

STAMP_NAME = "energon_plugins_demo.json"
STAMP_VERSION = 1


def default_cache_dir() -> pathlib.Path:
    """Where the demo keeps its data: ``$ENERGON_PLUGINS_CACHE`` or ``~/.cache/energon-plugins``."""
    env = os.environ.get("ENERGON_PLUGINS_CACHE")
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path("~/.cache/energon-plugins").expanduser()


def read_stamp(stamp_path: pathlib.Path) -> dict | None:
    """The parsed stamp at `stamp_path`, or None when it is missing or not JSON."""
    try:
        return json.loads(stamp_path.read_text())
    except (OSError, ValueError):
        return None


def reusable_info(stamp_path: pathlib.Path, args: dict[str, Any]) -> DatasetInfo | None:
    """The stamped DatasetInfo when the stamp was written with `args` and all its shards exist."""
    stamp = read_stamp(stamp_path)
    if stamp is None or stamp.get("args") != args:
        return None
    info = DatasetInfo.from_json(stamp["info"])
    if all(s.exists() for s in info.shards):
        return info
    return None


def write_stamp(stamp_path: pathlib.Path, args: dict[str, Any], info: DatasetInfo) -> None:
    """Record that `info` was written with `args` (read back by :func:`reusable_info`)."""
    stamp_path.write_text(json.dumps({"args": args, "info": info.to_json()}))


def clear_dataset_dir(path: pathlib.Path, overwrite: bool, marker: pathlib.Path) -> None:
    """Make `path` an empty directory; delete an old one only when `overwrite` and it is ours."""
    if path.exists() and any(path.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"{path}: directory exists with a different dataset; pass overwrite=True to replace it"
            )
        if not marker.exists():
            raise FileExistsError(
                f"{path}: refusing to delete a non-empty directory not written by energon_plugins.demo"
            )
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
