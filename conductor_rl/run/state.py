"""What a training run changes as it goes, and each checkpoint keeps: the weights version the
generators hold, the question stream's position after the last learned iteration's draw, the
questions drawn by iterations not yet learned (asynchronous training draws ahead), and the
infrastructure-error guard's window."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from conductor_rl.config import Config
from conductor_rl.config.redaction import recorded, redacted
from conductor_rl.run.infra_guard import InfraErrorGuard


@dataclass
class RunState:
    version: int = 0  # weights version the generators hold
    cursor: int = 0  # the stream's position after the last learned iteration's draw
    guard: InfraErrorGuard = field(default_factory=lambda: InfraErrorGuard(None))
    drawn: dict[int, list[str]] = field(default_factory=dict)  # question ids of iterations not yet learned
    in_flight: dict[int, list[str]] = field(default_factory=dict)  # what a resumed checkpoint had drawn ahead

    @classmethod
    def of(cls, config: Config, saved: dict[str, Any] | None) -> RunState:
        """A new run's state, or the one a checkpoint saved (`saved`: its state.json)."""
        t = config.train
        guard = InfraErrorGuard(t.max_infra_error_rate, t.infra_error_window, t.infra_error_min_steps)
        if saved is None:
            return cls(guard=guard)
        guard.restore(saved.get("infra_guard"))
        return cls(
            saved["weights_version"],
            saved["cursor"],
            guard,
            in_flight={int(j): ids for j, ids in saved.get("in_flight", {}).items()},
        )

    def note_draw(self, iteration: int, ids: Sequence[str]) -> str | None:
        """Remember what an iteration drew; a warning when a resumed run draws other questions than
        its checkpoint says were in flight."""
        self.drawn[iteration] = list(ids)
        expected = self.in_flight.pop(iteration, None)
        if expected is None or expected == list(ids):
            return None
        return (
            f"warning: iteration {iteration} drew other questions than the checkpoint recorded in flight "
            f"({len(set(ids) - set(expected))} differ): did data.questions or data.limit change since?"
        )

    def learned(self, iteration: int, cursor: int) -> None:
        """The learner has stepped on `iteration`, drawn when the stream stood at `cursor`."""
        self.cursor = cursor
        self.drawn.pop(iteration, None)

    def checkpoint(self, iteration: int, config: Config, ledger: dict[str, Any]) -> dict[str, Any]:
        """The state a checkpoint of `iteration` saves. `in_flight`: the questions iterations after it
        had drawn (asynchronous training); a resume starts from `cursor` and draws them again."""
        return {
            "iteration": iteration,
            "cursor": self.cursor,
            "weights_version": self.version,
            "ledger": ledger,
            "config": recorded(config),  # secrets masked (conductor_rl/config/redaction.py)
            "saved_at": time.time(),
            "infra_guard": self.guard.state(),
            "in_flight": {str(j): ids for j, ids in sorted(dict(self.drawn).items()) if j > iteration},
        }


#: What a run cannot change on resume: the policy's action space and meaning (its pool, in order) and
#: the Conductor (its model and prompt). Everything else may change, and the run's log says so.
FIXED_ON_RESUME = ("workers", "conductor")


def resume_conflicts(saved: dict[str, Any], config: Config) -> list[str]:
    """The settings of FIXED_ON_RESUME that differ between a checkpoint's configuration (`saved`, as
    state.json holds it) and `config`, each as "key: saved -> now". A setting the saved run did not have
    (an older version's checkpoint) is not compared."""
    before, now = _flat(redacted(saved)), _flat(recorded(config))
    changed = []
    for section in FIXED_ON_RESUME:
        keys = sorted({k for k in (*before, *now) if k == section or k.startswith((f"{section}.", f"{section}["))})
        if _flat_len(before, section) != _flat_len(now, section):
            changed.append(f"{section}: {_flat_len(before, section)} -> {_flat_len(now, section)} entries")
        for key in keys:
            if key in before and key in now and before[key] != now[key]:
                changed.append(f"{key}: {before[key]!r} -> {now[key]!r}")
    return changed


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        out = {f"{prefix}#": len(value)}
        for i, v in enumerate(value):
            out.update(_flat(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def _flat_len(flat: dict[str, Any], section: str) -> int | None:
    return flat.get(f"{section}#")
