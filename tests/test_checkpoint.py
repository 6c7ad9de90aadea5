"""Per-DP-rank loader state files: naming, round trip, and the setup check."""

import pytest
import torch

from energon_plugins.loading.checkpoint import (
    StateMismatchError,
    load_loader_state,
    save_loader_state,
    state_path,
)


class OpaqueState:
    """Stands for Energon's state classes, which torch's weights_only loader refuses."""

    def __init__(self, value):
        self.value = value


def test_state_file_name_per_dp_rank(tmp_path):
    assert state_path(tmp_path, 7).name == "train_dataloader_dprank007.pt"
    with pytest.raises(ValueError):
        state_path(tmp_path, -1)


def test_round_trip_of_a_non_tensor_state(tmp_path):
    fingerprint = {"world_size": 2, "path": "/data/x", "encoder": "multimodal"}
    path = save_loader_state(tmp_path, OpaqueState([1, 2]), dp_rank=1, fingerprint=fingerprint)
    with pytest.raises(Exception):
        torch.load(path)  # the default weights_only=True refuses it; ours does not
    state = load_loader_state(tmp_path, dp_rank=1, fingerprint=fingerprint)
    assert isinstance(state, OpaqueState) and state.value == [1, 2]
    assert list(tmp_path.iterdir()) == [path], "no temporary file left behind"


def test_a_different_setup_is_named(tmp_path):
    save_loader_state(tmp_path, {}, dp_rank=0, fingerprint={"world_size": 4, "path": "/a"})
    with pytest.raises(StateMismatchError) as info:
        load_loader_state(tmp_path, dp_rank=0, fingerprint={"world_size": 2, "path": "/a", "x": 1})
    text = str(info.value)
    assert "world_size: saved 4, now 2" in text and "x: saved (absent), now 1" in text
    assert "path" not in text.split("Differences:")[1]


def test_missing_rank_lists_what_is_there(tmp_path):
    save_loader_state(tmp_path, {}, dp_rank=0, fingerprint={})
    with pytest.raises(FileNotFoundError, match="present: train_dataloader_dprank000.pt"):
        load_loader_state(tmp_path, dp_rank=3)
