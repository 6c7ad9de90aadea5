"""The site every bad-input table of config files, overrides and datasets starts from, and the
checks each of its rows makes.

A site is a folder holding a good config (``good.yaml``) beside the offline tokenizer it names;
its ``path`` is the session's VQA dataset. A row writes its case next to it, runs a verb
in-process (click's runner) inside :func:`~tests._refusals.unchanged` over the site and the
dataset, and asserts a clean refusal: the exit code, no unhandled exception, a message that
names the culprit and shows no traceback (:func:`~tests._refusals.assert_refusal`).
"""

import copy
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result

from energon_plugins.cli import cli
from tests._refusals import assert_refusal, unchanged

SEQ = 320


def make_site(root: Path, dataset: Path, tokenizer: Any) -> Path:
    """Write ``root/tokenizer`` and ``root/good.yaml`` (``path`` is ``dataset``); return ``root``."""
    tokenizer.save_pretrained(root / "tokenizer")
    good = {
        "path": str(dataset),
        "tokenizer": {"path": "tokenizer"},
        "seq_length": SEQ,
        "num_workers": 0,
        "micro_batch_size": 2,
    }
    (root / "good.yaml").write_text(yaml.safe_dump(good), encoding="utf-8")
    return root


def good_config(site: Path) -> dict[str, Any]:
    """The site's good config as a mapping."""
    return yaml.safe_load((site / "good.yaml").read_text(encoding="utf-8"))


def changed(site: Path, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The good config with ``changes`` applied (dotted keys; ``...`` deletes a key)."""
    config = copy.deepcopy(good_config(site))
    for key, value in changes.items():
        *parents, last = key.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        if value is ...:
            node.pop(last, None)
        else:
            node[last] = value
    return config


def write_case(site: Path, content: "str | bytes | Mapping[str, Any]", name: str = "case.yaml") -> Path:
    """Write a case file into the site: text or bytes as they are, a mapping as YAML."""
    path = site / "cases" / name
    path.parent.mkdir(exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(dict(content), sort_keys=False), encoding="utf-8")
    return path


def run(args: Sequence[str], env: Mapping[str, str | None] | None = None) -> Result:
    """``energon-plugins ARGS`` in this process."""
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def refused(
    args: Sequence[Any],
    *names: str,
    watch: Iterable[Path] = (),
    env: Mapping[str, str | None] | None = None,
    exit_codes: Iterable[int] = (1,),
    one_paragraph: bool = True,
) -> Result:
    """Run the verb; assert a clean refusal naming ``names`` that changed nothing under ``watch``."""
    with unchanged(*watch):
        result = run(args, env=env)
    assert result.exit_code in set(exit_codes), (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert_refusal(result.output, *names, one_paragraph=one_paragraph)
    return result
