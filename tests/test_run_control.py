"""jobs/run_control.py: when a run that ends still needs a checkpoint, how its
phases are reported to an observer, and how a stop request becomes StopRun."""

from __future__ import annotations

import os
import signal

import pytest

from jobs.run_control import Phase, Phases, StopRun, StopSignal, needs_final_checkpoint


@pytest.mark.parametrize(
    "stopped, done, saved, spent, expected, why",
    [
        ("finished", 9, 9, 1.0, False, "the last iteration is checkpointed already"),
        ("finished", 9, 7, 1.0, True, "iterations after the last checkpoint"),
        ("SIGTERM", 6, 4, 0.0, True, "a stop after iterations not yet checkpointed"),
        ("SIGTERM", 4, 4, 0.5, True, "a stop keeps the abandoned iteration's spending in the ledger"),
        ("budget", 4, 4, 0.0, True, "a stop resumed from iteration 4: its checkpoint is written again"),
        ("SIGINT", -1, -1, 0.25, True, "the run's first iteration spent money: 'iteration -1', the starting weights"),
        ("SIGINT", -1, -1, 0.0, False, "nothing done and nothing spent: nothing to keep"),
        ("finished", -1, -1, 0.0, False, "a finished run with no iteration (nothing to do)"),
    ],
)
def test_needs_final_checkpoint(stopped, done, saved, spent, expected, why):
    assert needs_final_checkpoint(stopped, done, saved, spent) is expected, why


def test_each_phase_adds_up_and_reaches_the_observer_with_its_rollouts():
    heard: list[Phase] = []
    phases = Phases(iteration=3, observer=heard.append)
    rollouts = ["r0", "r1"]  # the observer only passes them on
    with phases.timed("execute", rollouts):
        pass
    with phases.timed("grade"):
        pass
    with phases.timed("execute", rollouts[:1]):
        pass
    assert [(p.name, p.iteration, list(p.rollouts)) for p in heard] == [
        ("execute", 3, ["r0", "r1"]),
        ("grade", 3, []),
        ("execute", 3, ["r0"]),
    ]
    assert all(p.ended >= p.started for p in heard)
    execute = sum(p.ended - p.started for p in heard if p.name == "execute")
    assert phases.seconds["execute"] == pytest.approx(execute)
    assert set(phases.seconds) == {"execute", "grade"}


def test_a_phase_that_raises_is_still_timed_and_heard():
    heard: list[Phase] = []
    phases = Phases(0, heard.append)
    with pytest.raises(StopRun), phases.timed("execute"):
        raise StopRun("budget")
    assert [p.name for p in heard] == ["execute"] and "execute" in phases.seconds


def test_sigterm_asks_to_stop_at_the_next_safe_point():
    stop, before = StopSignal(), signal.getsignal(signal.SIGTERM)
    with stop.installed():
        stop.check()  # nothing asked yet
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.reason == "SIGTERM"
        with pytest.raises(StopRun, match="SIGTERM"):
            stop.check()
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back
