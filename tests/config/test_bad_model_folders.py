"""Bad tokenizer and processor folders, one table: what ``validate`` says about them.

Each row copies the offline demo tokenizer into a folder, damages it (a file that is not JSON,
a missing chat template, a ``preprocessor_config.json`` transformers cannot load, code shipped
in the folder that a ``trust_remote_code`` load would run...) and runs ``energon-plugins
validate`` on a config naming it. The refusal exits 1, names the config key and the folder or
file, shows no traceback, and changes nothing on disk: the shipped code of the remote-code rows
would write a file into its folder if it ever ran.
"""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.config._bad_site import make_site, refused, run, write_case

RAN = "ran.txt"
"""What the shipped code of a remote-code folder writes into its folder when it runs."""


def _config(folder: Path) -> dict:
    return json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))


def _write_config(folder: Path, data: dict) -> None:
    (folder / "tokenizer_config.json").write_text(json.dumps(data), encoding="utf-8")


def _remote_tokenizer(folder: Path) -> None:
    data = _config(folder)
    data.update(
        tokenizer_class="ShippedTokenizer",
        auto_map={"AutoTokenizer": ["tokenization_shipped.ShippedTokenizer", None]},
    )
    _write_config(folder, data)
    (folder / "tokenization_shipped.py").write_text(
        f"import pathlib\npathlib.Path(__file__).with_name({RAN!r}).write_text('ran')\n"
        "from transformers import PreTrainedTokenizerFast as ShippedTokenizer\n",
        encoding="utf-8",
    )


def _model_config_only(folder: Path) -> None:
    for file in folder.iterdir():
        file.unlink()
    (folder / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")


def _remote_processor(folder: Path) -> None:
    (folder / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "image_processor_type": "ShippedProcessor",
                "auto_map": {"AutoImageProcessor": "image_processing_shipped.ShippedProcessor"},
            }
        ),
        encoding="utf-8",
    )
    (folder / "image_processing_shipped.py").write_text(
        f"import pathlib\npathlib.Path(__file__).with_name({RAN!r}).write_text('ran')\n", encoding="utf-8"
    )


FOLDERS: dict[str, Callable[[Path], None]] = {
    "config-not-json": lambda f: (f / "tokenizer_config.json").write_text("{broken", encoding="utf-8"),
    "tokenizer-json-cut": lambda f: (f / "tokenizer.json").write_text(
        (f / "tokenizer.json").read_text()[:500]
    ),
    "no-tokenizer-files": _model_config_only,
    "no-chat-template": lambda f: (f / "chat_template.jinja").unlink(),
    "remote-tokenizer": _remote_tokenizer,
    "processor-not-json": lambda f: (f / "preprocessor_config.json").write_text("{broken", encoding="utf-8"),
    "processor-unknown-type": lambda f: (f / "preprocessor_config.json").write_text(
        json.dumps({"image_processor_type": "NoSuchImageProcessor"}), encoding="utf-8"
    ),
    "processor-remote-code": _remote_processor,
}
"""Damaged copies of the demo tokenizer folder, by name."""


@pytest.fixture(scope="module")
def site(tmp_path_factory, vqa_dataset, tokenizer) -> Path:
    root = make_site(tmp_path_factory.mktemp("bad-model-folders"), vqa_dataset.path, tokenizer)
    for name, damage in FOLDERS.items():
        shutil.copytree(root / "tokenizer", root / "models" / name)
        damage(root / "models" / name)
    (root / "models" / "empty").mkdir()
    (root / "models" / "a-file").write_text("not a folder\n", encoding="utf-8")
    return root


CASES = [
    # (the config keys changed, "{models}" standing for the folder of damaged copies; whether
    # the config check alone refuses it; what the message names)
    pytest.param(
        {"tokenizer": {"path": "{models}/config-not-json"}},
        False,
        ["tokenizer.path", "config-not-json", "JSONDecodeError"],
        id="tokenizer-config-not-json",
    ),
    pytest.param(
        {"tokenizer": {"path": "{models}/tokenizer-json-cut"}},
        False,
        ["tokenizer.path", "tokenizer-json-cut"],
        id="tokenizer-json-cut-short",
    ),
    pytest.param(
        {"tokenizer": {"path": "{models}/no-tokenizer-files"}},
        False,
        ["tokenizer.path", "no-tokenizer-files", "cannot load a tokenizer"],
        id="model-config-without-tokenizer",
    ),
    pytest.param(
        {"tokenizer": {"path": "{models}/no-chat-template"}},
        False,
        ["tokenizer.path", "no chat template"],
        id="no-chat-template",
    ),
    pytest.param(
        {"tokenizer": {"path": "{models}/remote-tokenizer"}},
        False,
        ["tokenizer.path", "remote-tokenizer", "never run", "auto_map"],
        id="tokenizer-needs-remote-code",
    ),
    pytest.param(
        {"tokenizer": {"path": "{models}/processor-not-json"}},
        False,
        ["tokenizer.path", "preprocessor_config.json", "not a valid JSON"],
        id="model-processor-not-json",
    ),
    pytest.param(
        {"tokenizer": {"path": "{models}/processor-unknown-type"}},
        False,
        ["tokenizer.path", "preprocessor_config.json", "Unrecognized image processor"],
        id="model-processor-unknown-type",
    ),
    pytest.param(
        {"image_processor": {"name": "hf", "options": {"path": "{models}/processor-not-json"}}},
        False,
        ["image_processor", "processor-not-json", "not a valid JSON"],
        id="hf-processor-path-not-json",
    ),
    pytest.param(
        {"image_processor": {"name": "hf", "options": {"path": "{models}/absent"}}},
        False,
        ["image_processor.options.path", "absent", "not a directory"],
        id="hf-processor-path-missing",
    ),
    pytest.param(
        {"image_processor": {"name": "hf", "options": {"path": "{models}/empty"}}},
        False,
        ["image_processor.options.path", "empty", "no preprocessor_config.json"],
        id="hf-processor-path-empty",
    ),
    pytest.param(
        {"image_processor": {"name": "hf", "options": {"class_name": "NoSuchImageProcessor"}}},
        False,
        ["image_processor.options.class_name", "NoSuchImageProcessor"],
        id="hf-processor-unknown-class",
    ),
    pytest.param(
        {"task_encoder": {"name": "hf-processor", "options": {"processor": "{models}/absent"}}},
        False,
        ["task_encoder.options.processor", "absent", "not a directory"],
        id="model-processor-folder-missing",
    ),
    pytest.param(
        {"task_encoder": {"name": "hf-processor", "options": {"processor": "{models}/empty"}}},
        False,
        ["task_encoder.options.processor", "empty", "AutoProcessor cannot load"],
        id="model-processor-folder-empty",
    ),
    pytest.param(
        {"task_encoder": {"name": "hf-processor"}},
        False,
        ["task_encoder.options.processor", "not a multimodal processor"],
        id="model-processor-of-a-tokenizer",
    ),
    pytest.param(
        {"tokenizer": {"path": "{models}/a-file"}},
        True,
        ["tokenizer.path", "a-file", "is a file"],
        id="tokenizer-a-file",
    ),
    pytest.param(
        {"tokenizer": {"path": "{models}/absent"}},
        True,
        ["tokenizer.path", "absent", "does not exist"],
        id="tokenizer-missing",
    ),
    pytest.param(
        {"tokenizer": {"path": "no-such-org/no-such-model"}},
        True,
        ["tokenizer.path", "no-such-org/no-such-model", "cache"],
        id="tokenizer-hub-id-not-cached",
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("changes", "quick", "named"), CASES)
def test_a_bad_model_folder_is_named(site, vqa_dataset, changes, quick, named):
    config = yaml.safe_load((site / "good.yaml").read_text(encoding="utf-8"))
    config["tokenizer"]["path"] = str(site / "tokenizer")
    config.update(json.loads(json.dumps(changes).replace("{models}", str(site / "models"))))
    case = write_case(site, config)
    refused(["validate", case, *(["--quick"] if quick else [])], *named, watch=(site, vqa_dataset.path))
    assert not list((site / "models").rglob(RAN)), "code shipped in a model folder ran"


def test_a_processor_that_needs_remote_code_is_not_run(site, vqa_dataset):
    """A ``preprocessor_config.json`` naming shipped code: the default processor is used, and
    ``validate`` says so (a note, not an error: the tokenizer itself loads)."""
    config = yaml.safe_load((site / "good.yaml").read_text(encoding="utf-8"))
    config["tokenizer"]["path"] = str(site / "models" / "processor-remote-code")
    result = run(["validate", write_case(site, config)])
    assert "never run" in result.output, result.output
    assert not list((site / "models").rglob(RAN))
