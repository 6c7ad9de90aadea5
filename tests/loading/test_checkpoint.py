"""Per-DP-rank loader state files: naming, round trip through the restricted reader, the setup
check, and clear errors for truncated, corrupt and foreign files."""

import os
import zipfile

import pytest
import torch

from energon_plugins.loading.checkpoint import (
    StateFileError,
    StateMismatchError,
    load_loader_state,
    save_loader_state,
    state_path,
    value_digest,
)


def energon_like_state():
    """Energon's FlexState (a dict subclass torch's weights_only loader refuses) with a tensor."""
    from megatron.energon.state import FlexState

    state = FlexState()
    state["sample_index"] = 3
    state["rng"] = torch.arange(4, dtype=torch.uint8)
    return state


def test_state_file_name_per_dp_rank(tmp_path):
    assert state_path(tmp_path, 7).name == "train_dataloader_dprank007.pt"
    with pytest.raises(ValueError):
        state_path(tmp_path, -1)


def test_round_trip_of_an_energon_state(tmp_path):
    fingerprint = {"world_size": 2, "path": "/data/x", "encoder": "multimodal"}
    path = save_loader_state(tmp_path, energon_like_state(), dp_rank=1, fingerprint=fingerprint)
    with pytest.raises(Exception):
        torch.load(path)  # torch's weights_only loader refuses FlexState; ours reads it
    state = load_loader_state(tmp_path, dp_rank=1, fingerprint=fingerprint)
    assert type(state).__name__ == "FlexState" and state["sample_index"] == 3
    assert torch.equal(state["rng"], torch.arange(4, dtype=torch.uint8))
    assert list(tmp_path.iterdir()) == [path], "no temporary file left behind"


def test_files_are_laid_out_as_megatron_bridge_writes_them(tmp_path):
    """Bridge stores ``{"dataloader_state_dict": state}``; a file of Bridge's loads here."""
    path = save_loader_state(tmp_path, {"x": 1}, dp_rank=0, fingerprint={"a": 1})
    with zipfile.ZipFile(path):  # a torch.save zip archive
        pass
    bridge = tmp_path / "bridge"
    bridge.mkdir()
    torch.save({"dataloader_state_dict": {"y": 2}}, state_path(bridge, 0))
    assert load_loader_state(bridge, dp_rank=0, fingerprint={"a": 1}) == {"y": 2}


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


class Payload:
    """What a tampered file could hold: unpickling it would call ``os.getcwd``."""

    def __reduce__(self):
        return (os.getcwd, ())


@pytest.mark.parametrize(
    "write, words",
    [
        (lambda p: p.write_bytes(b""), "truncated, corrupt, or not written by torch.save"),
        (lambda p: p.write_bytes(b"not a zip at all"), "truncated, corrupt"),
        (lambda p: torch.save({"dataloader_state_dict": Payload()}, p), "references posix.getcwd"),
        (
            lambda p: (
                torch.save({"dataloader_state_dict": {}}, p)
                or p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
            ),
            "truncated",
        ),
        (lambda p: zipfile.ZipFile(p, "w").writestr("a.txt", "x"), "not a torch.save file"),
        (lambda p: torch.save([1, 2, 3], p), "holds no loader state"),
    ],
    ids=["empty", "garbage", "code", "truncated", "foreign-zip", "no-state"],
)
def test_bad_files_are_named_and_never_executed(tmp_path, write, words):
    path = state_path(tmp_path, 0)
    write(path)
    with pytest.raises(StateFileError) as info:
        load_loader_state(tmp_path, dp_rank=0)
    message = str(info.value)
    assert str(path) in message and words in message
    assert "\n" not in message


def test_value_digest_is_short_and_survives_an_alias_bomb():
    """A YAML alias bomb (each level repeating the previous 9 times) is digested through its
    shared structure, in well under a second, into a short string (never a repr)."""
    import time

    import yaml

    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        levels.append(
            f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [*{prev}, *{prev}, *{prev}, "
            f"*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]"
        )
    bomb = yaml.safe_load("\n".join(levels))["i"]
    started = time.perf_counter()
    digest = value_digest(bomb)
    assert time.perf_counter() - started < 1.0
    assert isinstance(digest, str) and digest.startswith("sha256:") and len(digest) < 40
    assert value_digest({"k": [1, 2]}) == value_digest({"k": [1, 2]})
    assert value_digest({"k": [1, 2]}) != value_digest({"k": [2, 1]})
    assert value_digest(5) == 5 and value_digest("short") == "short"
