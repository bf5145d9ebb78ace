"""Worker rosters: which of the pool's workers a question's prompt lists (paper §3.2,
adaptive worker selection).

The Conductor knows workers only as "Model 0" to "Model k-1". A roster is the
subset of the pool behind those numbers: `Roster((0, 2, 5))` lists three workers,
and the plan's Model 1 runs on pool worker 2. Training on rosters drawn per
question (`train.worker_subset`) teaches a Conductor to work with any subset; a
user then serves the one they have (`--workers name,name`).

Decisions where the paper is silent:
- A roster keeps the pool's order, so a roster of the whole pool is the plain
  pool and a Conductor trained on it reads the same numbers.
- Rosters are drawn per (seed, iteration, question id), so a resumed run draws
  what a straight run drew; every size in the range is equally likely, then
  every subset of that size.
- A plan is parsed against its roster: naming a number past the roster is a
  `PlanError` (reward 0), so no step reaches a worker the prompt did not list.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from conductor_rl.plan.language import Plan, Step

if TYPE_CHECKING:
    from conductor_rl.config import Config

T = TypeVar("T")


class RosterError(ValueError):
    """A roster that cannot be built from what was asked (unknown names, a bad size)."""


@dataclass(frozen=True)
class Roster:
    """`workers[i]` is the pool index of the prompt's "Model i"."""

    workers: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "workers", tuple(self.workers))
        if not self.workers:
            raise RosterError("a roster needs at least one worker")
        if len(set(self.workers)) != len(self.workers) or min(self.workers) < 0:
            raise RosterError(f"a roster lists distinct pool indices, got {list(self.workers)}")

    @classmethod
    def full(cls, n_workers: int) -> Roster:
        return cls(tuple(range(n_workers)))

    def __len__(self) -> int:
        return len(self.workers)

    def is_full(self, n_workers: int) -> bool:
        return self.workers == tuple(range(n_workers))

    def select(self, pool: Sequence[T]) -> list[T]:
        """The pool's members in roster order: what a plan's model ids index."""
        if max(self.workers) >= len(pool):
            raise RosterError(f"roster {list(self.workers)} names a worker past the pool's {len(pool)}")
        return [pool[i] for i in self.workers]

    def pool_id(self, model_id: int) -> int:
        """The pool index behind the prompt's "Model `model_id`"."""
        return self.workers[model_id]

    def pool_plan(self, plan: Plan) -> Plan:
        """The plan with pool indices for model ids (traces, metrics over the whole pool)."""
        return Plan(tuple(Step(self.pool_id(s.model_id), s.subtask, s.access) for s in plan.steps))


def draw_roster(n_workers: int, size: tuple[int, int], seed: int, key: str) -> Roster:
    """A roster of `size[0]..size[1]` workers (both included) out of `n_workers`, the
    same for the same (seed, key): pass the iteration and question id as `key`."""
    low, high = size
    if not 1 <= low <= high <= n_workers:
        raise RosterError(f"a roster size of {low}..{high} does not fit a pool of {n_workers} workers")
    digest = hashlib.sha256(f"roster|{seed}|{key}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    k = rng.randint(low, high)
    return Roster(tuple(sorted(rng.sample(range(n_workers), k))))


def roster_of(names: Sequence[str], pool_names: Sequence[str]) -> Roster:
    """The roster of the named workers (a user's `--workers a,b`), in the pool's order."""
    unknown = [n for n in names if n not in pool_names]
    if unknown:
        raise RosterError(f"unknown worker(s) {', '.join(map(repr, unknown))}; the pool has: {', '.join(pool_names)}")
    if len(set(names)) != len(names):
        raise RosterError(f"a worker is named twice in {', '.join(names)}")
    return Roster(tuple(sorted(pool_names.index(n) for n in names)))


def parse_worker_names(text: str) -> list[str]:
    """`--workers a,b, c` -> ['a', 'b', 'c']."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise RosterError("--workers names no worker; give comma-separated worker names")
    return names


def with_workers(config: Config, names: Sequence[str] | None) -> Config:
    """`config` offering the Conductor only the named workers (a user's subset), in the pool's
    order and renumbered as a roster is: what `ask`, `evaluate` and `Orchestrator` run with
    `--workers`. None: `config` unchanged."""
    if not names:
        return config
    roster = roster_of(list(names), [w.name for w in config.workers])
    return config.model_copy(update={"workers": roster.select(config.workers)})
