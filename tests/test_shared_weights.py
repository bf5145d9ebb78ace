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


def test_a_fused_weight_is_a_view_of_shared_memory_only_where_its_parts_lie_back_to_back(tmp_path):
    """conductor_rl/policy/vllm_load.py's zero-copy case: vLLM's qkv_proj is q, k, v stacked, so
    where the learner's q, k, v slots are adjacent the engine can read it in place; a bias
    between them (Qwen2's order), another dtype or a missing part leaves it to a copy."""
    import torch.nn as nn

    from conductor_rl.policy.vllm_load import _Packed, _region

    def staged(dtype=torch.float32):
        staging = nn.Parameter(torch.zeros(12, 16, dtype=dtype), requires_grad=False)
        return _Packed("layers.0.attn.qkv_proj.weight", nn.Module(), staging, staging.data)

    fused = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    parts = [(f"layers.0.attn.{p}_proj.weight", torch.randn(4, 16)) for p in "qkv"]  # 256 bytes: no padding
    bias = ("layers.0.attn.q_proj.bias", torch.randn(2))
    for order, fits in ((parts, True), ([parts[0], bias, *parts[1:]], False)):
        layout = layout_for(((n, t.dtype, tuple(t.shape)) for n, t in order), folder=str(tmp_path))
        writer = SharedWeightsWriter(layout)
        writer.write(order)
        incoming = dict(SharedWeightsReader(layout).tensors())
        writer.unlink()
        region = _region(staged(), incoming, fused)
        assert (region is not None) == fits
        if fits:
            assert torch.equal(region, torch.cat([t for _, t in parts]))
            assert region.data_ptr() == incoming[parts[0][0]].data_ptr()  # the memory itself, not a copy
            assert _region(staged(torch.bfloat16), incoming, fused) is None
            del incoming[parts[2][0]]
            assert _region(staged(), incoming, fused) is None
