"""Helpers shared by the sandbox tests."""

from __future__ import annotations

import time

from conductor_rl.grading.sandbox import _PROLOGUE_MARK as PROLOGUE_MARK
from conductor_rl.grading.sandbox import stray_processes

__all__ = ["HANG_GUARD_S", "PROLOGUE_MARK", "assert_nothing_left"]


# A bound on a wait that only a hang reaches, never a slow machine.
HANG_GUARD_S = 20.0


def assert_nothing_left(*marks: str, grace_s: float = 5.0) -> None:
    """Nothing a sandboxed program started is still running (allowing `grace_s` for exits in progress,
    which a busy machine slows; what the sandbox failed to kill runs far longer)."""
    deadline = time.monotonic() + grace_s
    while True:
        left = stray_processes(*marks)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"processes left running: {left}"
