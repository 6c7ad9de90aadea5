"""The environment ``make test-bridge`` builds: the released Bridge beside energon-plugins.

Installing energon-plugins must leave Bridge's megatron-core in place (before issue 25 it
downgraded it to 0.16 and Bridge broke), and the Transformer Engine stand-in must stay inside
Bridge's LoRA module (megatron-core must still see no Transformer Engine).
"""

import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.version import Version


def test_the_released_bridge_runs_on_python_3_12_with_megatron_core_0_19():
    assert sys.version_info[:2] == (3, 12)
    assert metadata.version("megatron-bridge") == "0.6.2"
    core = Version(metadata.version("megatron-core"))
    assert (core.major, core.minor) == (0, 19)


def test_energon_plugins_admits_the_installed_megatron_core():
    core = metadata.version("megatron-core")
    requirements = [Requirement(r) for r in metadata.requires("energon-plugins")]
    (pin,) = [r for r in requirements if r.name == "megatron-core"]
    assert pin.specifier.contains(core), f"{pin} excludes the installed megatron-core {core}"
    assert pin.specifier.contains("0.16.1"), "Python 3.11's last megatron-core must stay allowed"


def test_bridge_and_megatron_core_pieces_bridge_needs_import():
    import megatron.bridge
    from megatron.core.process_groups_config import MultiModuleProcessGroupCollection  # noqa: F401
    from megatron.training.models.base import ModelConfig  # noqa: F401  (not in megatron-core 0.16)

    assert megatron.bridge.__version__.startswith("0.6.2")


def test_the_transformer_engine_stand_in_stays_in_the_lora_module():
    import megatron.bridge.peft.lora_layers as lora_layers
    import megatron.core.fp8_utils as fp8_utils

    from tests_bridge.cpu_stand_ins import MissingTransformerEngine

    assert "transformer_engine" not in sys.modules
    assert fp8_utils.HAVE_TE is False, "megatron-core took the stand-in for Transformer Engine"
    assert lora_layers.te.__name__ == "transformer_engine.pytorch"
    assert issubclass(lora_layers.te.ops.Sequential, MissingTransformerEngine)
    with pytest.raises(RuntimeError, match="Transformer Engine is not installed"):
        lora_layers.te.Linear(4, 4)


def test_the_stand_in_refuses_to_hide_an_imported_transformer_engine(monkeypatch):
    import types

    from tests_bridge.cpu_stand_ins import transformer_engine_stub

    monkeypatch.setitem(sys.modules, "transformer_engine", types.ModuleType("transformer_engine"))
    with pytest.raises(ImportError, match="already imported"):
        with transformer_engine_stub():
            pass
