"""Learner -> engine weights through shared memory (conductor_rl/policy/shared_weights.py):
the layout, a round trip, writes seen after the path is gone, and the errors.
The path through real actors is in tests/test_generator.py."""

import os

import pytest
import torch

from conductor_rl.policy.shared_weights import (
    ALIGN,
    SharedMemoryTooSmall,
    SharedWeightsReader,
    SharedWeightsWriter,
    layout_for,
)


def weights(scale: float = 1.0) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        ("embed.weight", scale * torch.randn(7, 5, generator=g)),
        ("norm.weight", scale * torch.randn(3, generator=g)),
        ("head.bias", (scale * torch.randn(2, 2, generator=g)).to(torch.bfloat16)),
    ]


def test_every_engine_reads_what_the_learner_wrote_after_the_path_is_gone(tmp_path):
    named = weights()
    layout = layout_for(((n, t.dtype, tuple(t.shape)) for n, t in named), folder=str(tmp_path))
    assert all(slot.offset % ALIGN == 0 for slot in layout.slots) and layout.nbytes % ALIGN == 0
    writer = SharedWeightsWriter(layout)
    readers = [SharedWeightsReader(layout) for _ in range(2)]
    writer.unlink()
    assert not os.path.exists(layout.path)
    for version in (1.0, -2.0):  # each write replaces what every reader sees, through the same mapping
        writer.write(weights(version))
        for reader in readers:
            got = list(reader.tensors())
            assert [n for n, _ in got] == [n for n, _ in named]
            for (_, a), (_, b) in zip(got, weights(version)):
                assert a.dtype == b.dtype and torch.equal(a, b)


def test_a_weight_the_layout_lacks_or_a_missing_one_is_an_error(tmp_path):
    named = weights()
    layout = layout_for(((n, t.dtype, tuple(t.shape)) for n, t in named), folder=str(tmp_path))
    writer = SharedWeightsWriter(layout)
    with pytest.raises(ValueError, match="not in the shared layout"):
        writer.write([("other.weight", torch.zeros(2))])
    with pytest.raises(ValueError, match="2 weights written, the shared layout has 3"):
        writer.write(named[:2])
    writer.unlink()
    with pytest.raises(FileNotFoundError, match="learner's node"):
        SharedWeightsReader(layout)


def test_too_little_shared_memory_names_the_fix(tmp_path, monkeypatch):
    import shutil

    layout = layout_for([("w", torch.float32, (1024,))], folder=str(tmp_path))
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: shutil._ntuple_diskusage(10, 10, 100))
    with pytest.raises(SharedMemoryTooSmall, match="shm-size.*object_store"):
        SharedWeightsWriter(layout)
