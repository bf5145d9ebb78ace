"""Learner -> generator weights through shared memory, for engines on the
learner's node (`generator.weight_sync=shared_memory`; `auto` on CPUs).

The learner's rank 0 and each engine map one file in a memory file system
(/dev/shm): the learner copies its parameters in, each engine loads them
from views of the same memory (no serialising, no object store). A sync is
then one copy out of the learner and the engine's own load.

Both sides map the file once (`SharedWeightsWriter.create`,
`SharedWeightsReader`) and touch every page then, so a sync pays no page
faults; once every engine has mapped it the writer removes the path
(`unlink`), and the memory goes when the last process holding it exits, even
after a crash. Tensors sit at 64-byte aligned offsets in the order of the
layout, by Hugging Face name, as samplers load them.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

ALIGN = 64
PAGE = 4096
SHARED_MEMORY_DIR = "/dev/shm"


class SharedMemoryTooSmall(RuntimeError):
    """The memory file system cannot hold the weights; the message says how to make room."""


@dataclass(frozen=True)
class TensorSlot:
    name: str
    dtype: str  # "float32", ...
    shape: tuple[int, ...]
    offset: int  # bytes from the start of the file

    @property
    def nbytes(self) -> int:
        return _numel(self.shape) * torch.empty((), dtype=getattr(torch, self.dtype)).element_size()


@dataclass(frozen=True)
class WeightsLayout:
    """Where each tensor lives in the shared file (sent to every engine once)."""

    path: str
    slots: tuple[TensorSlot, ...]
    nbytes: int


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def layout_for(
    tensors: Iterable[tuple[str, torch.dtype, tuple[int, ...]]], folder: str = SHARED_MEMORY_DIR
) -> WeightsLayout:
    """A layout for (name, dtype, shape) in order, in a new file under `folder`."""
    slots, offset = [], 0
    for name, dtype, shape in tensors:
        slot = TensorSlot(name, str(dtype).removeprefix("torch."), tuple(int(d) for d in shape), offset)
        slots.append(slot)
        offset += -(-slot.nbytes // ALIGN) * ALIGN
    return WeightsLayout(str(Path(folder) / f"conductor-rl-weights-{uuid.uuid4().hex}.bin"), tuple(slots), offset)


def _views(buffer: torch.Tensor, layout: WeightsLayout) -> list[tuple[str, torch.Tensor]]:
    return [
        (s.name, buffer[s.offset : s.offset + s.nbytes].view(getattr(torch, s.dtype)).view(s.shape))
        for s in layout.slots
    ]


def _map(path: str, nbytes: int) -> torch.Tensor:
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)


class SharedWeightsWriter:
    """The learner's side: owns the file until `unlink`."""

    def __init__(self, layout: WeightsLayout) -> None:
        folder = os.path.dirname(layout.path)
        free = shutil.disk_usage(folder).free
        if free < layout.nbytes:
            raise SharedMemoryTooSmall(
                f"{folder} has {free / 1e9:.2f} GB free, the weights need {layout.nbytes / 1e9:.2f} GB: enlarge it "
                f"(docker run --shm-size=...), or set generator.weight_sync=object_store"
            )
        descriptor = os.open(layout.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(descriptor, layout.nbytes)
        finally:
            os.close(descriptor)
        self.layout = layout
        self.buffer = _map(layout.path, layout.nbytes)
        self.buffer[::PAGE].fill_(0)  # fault every page in now, not during the first sync
        self.views = dict(_views(self.buffer, layout))

    def write(self, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy each named tensor into its slot (every slot, in the layout's order)."""
        written = 0
        for name, tensor in tensors:
            slot = self.views.get(name)
            if slot is None or slot.shape != tensor.shape:
                raise ValueError(
                    f"weight {name} {tuple(tensor.shape)} is not in the shared layout "
                    f"({None if slot is None else tuple(slot.shape)})"
                )
            slot.copy_(tensor.detach())
            written += 1
        if written != len(self.views):
            raise ValueError(f"{written} weights written, the shared layout has {len(self.views)}")

    def unlink(self) -> None:
        """Remove the path; mappings (this one and the engines') stay valid."""
        try:
            os.unlink(self.layout.path)
        except FileNotFoundError:
            pass


class SharedWeightsReader:
    """An engine's side: views of the learner's weights, valid after each `write`."""

    def __init__(self, layout: WeightsLayout) -> None:
        if not os.path.exists(layout.path):
            raise FileNotFoundError(
                f"no shared weights at {layout.path}: the engine must run on the learner's node "
                f"(generator.weight_sync=shared_memory), or use object_store"
            )
        self.layout = layout
        self.buffer = _map(layout.path, layout.nbytes)
        int(self.buffer[::PAGE].sum())  # fault every page in now, not during the first sync

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        return iter(_views(self.buffer, self.layout))
