"""Training checkpoints (conductor_rl/run/checkpoint.py): written whole or not at all,
the last K kept, partial folders never taken for a checkpoint, and a failed write
(a full disk) leaves the previous checkpoint as the latest one."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from conductor_rl.run import checkpoint as ckpt
from conductor_rl.run.checkpoint import CheckpointError, Checkpoints, check_writable, checkpoint_name


def write_weights(folder: Path) -> None:
    (folder / "model").mkdir()
    (folder / "model" / "weights.bin").write_bytes(b"w" * 64)


def state(iteration: int) -> dict:
    return {"iteration": iteration, "cursor": 4 * (iteration + 1), "weights_version": iteration + 1}


def disk_full(_folder: Path) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_save_writes_a_complete_checkpoint_that_latest_and_load_state_find(tmp_path):
    cps = Checkpoints(tmp_path / "checkpoints", keep=3)
    assert cps.latest() is None and cps.complete() == []
    path = cps.save(7, state(7), write_weights)
    assert path == tmp_path / "checkpoints" / checkpoint_name(7) == tmp_path / "checkpoints" / "ckpt-000007"
    assert (path / "model" / "weights.bin").read_bytes() == b"w" * 64
    assert cps.latest() == path
    assert cps.load_state() == state(7)
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["ckpt-000007"]  # no .partial left behind


def test_only_the_last_k_checkpoints_are_kept_and_latest_is_the_newest(tmp_path):
    cps = Checkpoints(tmp_path, keep=2)
    for i in (0, 4, 9, 10, 14):
        cps.save(i, state(i), write_weights)
    assert [p.name for p in cps.complete()] == ["ckpt-000010", "ckpt-000014"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000010", "ckpt-000014"]
    assert cps.latest().name == "ckpt-000014"
    assert cps.load_state()["iteration"] == 14
    # Order is by iteration, not by the time the folder was written.
    assert cps.load_state(tmp_path / "ckpt-000010")["iteration"] == 10


def test_partial_folders_and_folders_without_state_are_not_checkpoints(tmp_path):
    cps = Checkpoints(tmp_path, keep=5)
    good = cps.save(3, state(3), write_weights)
    # A crash mid-write leaves a .partial folder (even one that got its state file),
    # a kill before the state file leaves a folder without one: neither is the latest.
    partial = tmp_path / (checkpoint_name(8) + ".partial")
    partial.mkdir()
    (partial / "state.json").write_text(json.dumps(state(8)))
    stateless = tmp_path / checkpoint_name(9)
    (stateless / "model").mkdir(parents=True)
    (tmp_path / "ckpt-000010.txt").write_text("a file, not a folder")
    (tmp_path / "other-000011").mkdir()
    assert cps.complete() == [good]
    assert cps.latest() == good
    assert cps.load_state()["iteration"] == 3


@pytest.mark.parametrize("where", ["weights", "state file"])
def test_a_failed_write_keeps_the_previous_checkpoint_and_names_the_fix(tmp_path, monkeypatch, where):
    cps = Checkpoints(tmp_path, keep=1)
    previous = cps.save(4, state(4), write_weights)
    if where == "weights":
        write = disk_full
    else:
        write = write_weights
        monkeypatch.setattr(ckpt, "write_atomically", lambda path, write, binary=False: disk_full(path))
    with pytest.raises(CheckpointError) as err:
        cps.save(9, state(9), write)
    message = str(err.value)
    assert "No space left on device" in message
    assert "free disk space" in message and "--resume" in message, message
    assert str(previous) in message, "the message must say which checkpoint is still intact"
    assert isinstance(err.value.__cause__, OSError) and err.value.__cause__.errno == errno.ENOSPC
    # keep=1 must not have deleted the previous one for a checkpoint that never completed.
    assert cps.latest() == previous and cps.load_state() == state(4)
    assert (previous / "model" / "weights.bin").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000004"], "the partial folder must be removed"


def test_a_failed_save_of_the_same_iteration_again_keeps_the_first_one(tmp_path):
    # A stop right after a periodic save writes the same iteration twice.
    cps = Checkpoints(tmp_path, keep=2)
    first = cps.save(5, state(5), write_weights)
    with pytest.raises(CheckpointError):
        cps.save(5, {**state(5), "cursor": 999}, disk_full)
    assert cps.latest() == first and cps.load_state()["cursor"] == state(5)["cursor"]
    # ... and a successful save of the same iteration replaces it.
    cps.save(5, {**state(5), "cursor": 21}, write_weights)
    assert cps.load_state()["cursor"] == 21 and [p.name for p in cps.complete()] == ["ckpt-000005"]


def test_load_state_without_a_checkpoint_or_with_a_corrupt_one_says_what_to_do(tmp_path):
    cps = Checkpoints(tmp_path / "none")
    with pytest.raises(CheckpointError, match="no complete checkpoint.*without --resume"):
        cps.load_state()
    cps = Checkpoints(tmp_path / "bad")
    bad = tmp_path / "bad" / checkpoint_name(2)
    bad.mkdir(parents=True)
    (bad / "state.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="unreadable.*remove it"):
        cps.load_state()


def test_check_writable_creates_the_folder_and_refuses_one_under_a_regular_file(tmp_path):
    folder = check_writable(tmp_path / "a" / "b")
    assert folder.is_dir() and list(folder.iterdir()) == []  # the probe file is gone
    blocker = tmp_path / "file.txt"
    blocker.write_text("I am a file")
    with pytest.raises(CheckpointError, match=r"not writable.*set train.output_dir"):
        check_writable(blocker / "sub")
    assert blocker.read_text() == "I am a file"
