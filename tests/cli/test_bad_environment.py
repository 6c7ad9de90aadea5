"""Bad environment variables, one table: every verb that reads them names them.

``ENERGON_PLUGINS_*`` variables with a typo in the name or in a distribution they list are
refused by each verb that loads the plugin registry (``validate``, ``show``, ``schema``,
``list``, ``convert``, ``preview``) before it does anything else; ``validate`` also checks the
variables a run reads later (``ENERGON_PLUGINS_DATA_TIMEOUT``, read when the validation loader is
built), and names the Hugging Face cache a hub id was looked for in. Each row exits 1 naming the
variable and its value, with no traceback, and changes nothing in the site or the dataset.
"""

from pathlib import Path

import pytest

import energon_plugins
from tests.config._bad_site import make_site, refused, run, write_case


@pytest.fixture(scope="module")
def site(tmp_path_factory, vqa_dataset, tokenizer) -> Path:
    root = make_site(tmp_path_factory.mktemp("bad-environment"), vqa_dataset.path, tokenizer)
    (root / "records.json").write_text("[]", encoding="utf-8")
    return root


@pytest.fixture
def fresh_registry():
    """The registry reads the environment once: load it again around each row."""
    energon_plugins.reset_registry()
    yield
    energon_plugins.reset_registry()


VERBS = {
    "validate": ["validate", "--quick", "{site}/good.yaml"],
    "show": ["show", "multimodal"],
    "schema": ["schema"],
    "list": ["list"],
    "convert": ["convert", "{site}/records.json", "{site}/out", "--from", "llava-json"],
    "preview": ["preview", "{site}/good.yaml"],
}

CASES = [
    # (variable, value, verb, what the message names)
    *(
        pytest.param(
            "ENERGON_PLUGINS_DISABLED",
            "x",
            verb,
            ["ENERGON_PLUGINS_DISABLED", "did you mean 'ENERGON_PLUGINS_DISABLE'"],
            id=f"variable-typo-{verb}",
        )
        for verb in ("validate", "show", "schema", "convert", "preview")
    ),
    *(
        pytest.param(
            "ENERGON_PLUGINS_DISABLE",
            "energon-plugin-nope",
            verb,
            ["ENERGON_PLUGINS_DISABLE", "'energon-plugin-nope'", "installed"],
            id=f"disable-unknown-{verb}",
        )
        for verb in ("validate", "list", "convert")
    ),
    *(
        pytest.param(
            "ENERGON_PLUGINS_LOAD",
            "energon-plugin-lava",
            verb,
            ["ENERGON_PLUGINS_LOAD", "'energon-plugin-lava'", "did you mean 'energon-plugin-llava'"],
            id=f"load-typo-{verb}",
        )
        for verb in ("validate", "show", "schema")
    ),
    pytest.param(
        "ENERGON_PLUGINS_DATA_TIMEOUT",
        "abc",
        "validate",
        ["ENERGON_PLUGINS_DATA_TIMEOUT", "'abc'"],
        id="timeout-text",
    ),
    pytest.param(
        "ENERGON_PLUGINS_DATA_TIMEOUT",
        "-5",
        "validate",
        ["ENERGON_PLUGINS_DATA_TIMEOUT", "'-5'"],
        id="timeout-negative",
    ),
    pytest.param(
        "ENERGON_PLUGINS_DATA_TIMEOUT",
        "inf",
        "validate",
        ["ENERGON_PLUGINS_DATA_TIMEOUT", "'inf'"],
        id="timeout-infinite",
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("variable", "value", "verb", "named"), CASES)
def test_a_bad_variable_is_named(site, vqa_dataset, fresh_registry, variable, value, verb, named):
    args = [arg.format(site=site) for arg in VERBS[verb]]
    refused(args, *named, watch=(site, vqa_dataset.path), env={variable: value})
    assert not (site / "out").exists()


@pytest.mark.bad_input
def test_a_hub_id_missing_from_the_cache_names_the_cache(site, vqa_dataset, fresh_registry):
    config = {"path": str(vqa_dataset.path), "tokenizer": {"path": "no-such-org/no-such-model"}}
    case = write_case(site, config)
    absent = site / "absent-cache"
    refused(
        ["validate", "--quick", case],
        "tokenizer.path",
        "no-such-org/no-such-model",
        str(absent),
        watch=(site, vqa_dataset.path),
        env={"HF_HUB_CACHE": str(absent)},
    )


def test_a_columns_value_that_is_no_number_is_ignored(fresh_registry):
    result = run(["list"], env={"COLUMNS": "wide"})
    assert result.exit_code == 0, result.output
    assert "multimodal" in result.output
