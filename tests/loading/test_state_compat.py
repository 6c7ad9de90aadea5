"""Loader states saved by energon-plugins 0.1.0 restore exactly with today's code.

The fixture (``tests/loading/fixtures/state-0.1.0``, written by its ``make_fixture.py`` with the 0.1.0
code) holds a small prepared dataset, the demo tokenizer, one training-loader state file per
setup and the sample keys and token digests of the batches that followed each save. Moving a
module must not change what a saved state means: the fingerprint names components by their
registered names, and the state holds no class of this package.
"""

import hashlib
import json
import pathlib
import shutil
import zipfile

import pytest

FIXTURE = pathlib.Path(__file__).resolve().parent / "fixtures" / "state-0.1.0"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())
STATE_FILE = "train_dataloader_dprank000.pt"


@pytest.fixture(scope="module")
def fixture_copy(tmp_path_factory):
    """The fixture's dataset and tokenizer, copied (Energon may write next to a dataset)."""
    root = tmp_path_factory.mktemp("state-0.1.0")
    for name in ("dataset", "tokenizer", "states"):
        shutil.copytree(FIXTURE / name, root / name)
    return root


def _config(root: pathlib.Path, setup: dict) -> dict:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixture", FIXTURE / "make_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.config(setup)
    config["path"] = str(root / "dataset")
    config["tokenizer"] = {"path": str(root / "tokenizer")}
    return config


def _digest(batch) -> dict:
    return {
        "keys": [str(k) for k in batch["__keys__"]],
        "tokens_sha256": hashlib.sha256(batch["tokens"].numpy().tobytes()).hexdigest(),
    }


def test_the_fixture_was_written_by_0_1_0():
    assert EXPECTED["energon_plugins_version"] == "0.1.0"
    assert set(EXPECTED["setups"]) == {"plain", "packed"}


@pytest.mark.parametrize("setup", sorted(EXPECTED["setups"]))
def test_a_0_1_0_state_pickles_no_class_of_this_package(setup):
    """The pickled state refers to Energon's and Python's classes only, so moving one of ours
    cannot break unpickling (checked on the pickle's opcodes, without unpickling). Class paths
    that appear as plain strings (the fingerprint's) are compared by
    ``checkpoint.COMPONENT_NAMES``."""
    import pickletools

    with zipfile.ZipFile(FIXTURE / "states" / setup / STATE_FILE) as archive:
        data = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
    ops = list(pickletools.genops(data))
    classes = [str(arg) for op, arg, _ in ops if op.name == "GLOBAL"]
    # STACK_GLOBAL takes module and name from the two strings pushed (and memoised) before it
    strings = [str(arg) for op, arg, _ in ops if op.name.endswith("UNICODE")]
    assert ops and strings
    assert not [name for name in classes if name.startswith("energon_plugins")]
    from energon_plugins.loading.checkpoint import COMPONENT_NAMES

    named = {s for s in strings if s.startswith("energon_plugins")}
    assert named <= set(COMPONENT_NAMES), named - set(COMPONENT_NAMES)


@pytest.mark.parametrize("setup", sorted(EXPECTED["setups"]))
def test_a_0_1_0_state_restores_exactly(fixture_copy, setup):
    import energon_plugins
    from energon_plugins.loading.checkpoint import load_datamodule_state

    expected = EXPECTED["setups"][setup]
    dm = energon_plugins.EnergonMultiModalDataModule.from_config(_config(fixture_copy, expected["config"]))
    load_datamodule_state(dm, fixture_copy / "states" / setup)
    loader = dm.train_dataloader()
    got = [_digest(next(loader)) for _ in expected["after"]]
    assert got == expected["after"]


def test_a_changed_setup_is_still_refused(fixture_copy):
    """The fixture's fingerprint is read and compared: another seq_length is named."""
    import energon_plugins
    from energon_plugins.loading.checkpoint import StateMismatchError, load_datamodule_state

    config = _config(fixture_copy, EXPECTED["setups"]["plain"]["config"])
    dm = energon_plugins.EnergonMultiModalDataModule.from_config({**config, "seq_length": 192})
    with pytest.raises(StateMismatchError, match="seq_length"):
        load_datamodule_state(dm, fixture_copy / "states" / "plain")


def test_a_built_in_packing_strategy_is_recorded_by_its_registered_name(fixture_copy):
    import energon_plugins
    from energon_plugins.loading.checkpoint import loader_fingerprint

    config = _config(fixture_copy, EXPECTED["setups"]["packed"]["config"])
    dm = energon_plugins.EnergonMultiModalDataModule.from_config({**config, "num_workers": 0})
    printed = loader_fingerprint(dm, dp_rank=0, dp_world_size=1)
    assert printed["packing"] == "first-fit-decreasing"
    assert printed["task_encoder"] == "multimodal"
