"""Worker rosters: which of the pool's workers a question's prompt lists, and under which
names (paper §3.2, adaptive worker selection).

A roster is the subset of the pool a prompt offers: `Roster((0, 2, 5), ids=(0, 2, 5))`
lists three workers as Model 0, Model 2 and Model 5. A plan names workers by those
numbers; parsing it against the roster (`parse_plan(..., ids=roster.model_ids)`) gives
steps that hold each worker's place in the roster, which `select` turns into the
pool's members. Training on rosters drawn per question (`train.worker_subset`)
teaches a Conductor to work with any subset; a user then serves the one they have
(`--workers name,name`).

Decisions where the paper is silent:
- Identity (`conductor.worker_identity`): with `number` (the default) a worker is
  listed under one number in every roster, its `model_id` (else its place in the
  pool), so what the Conductor learns about "Model 3" holds whatever else is
  listed; with `description` each roster renumbers Model 0..k-1 and lists every
  worker with its stable `description`. The paper's prompt renumbers per roster
  and says nothing of identity; renumbering alone made "Model 0" a different
  worker in each roster, and nothing learnt about a worker carried over
  (docs/decisions.md, Worker identity).
- A roster keeps the pool's order, so a roster of the whole pool is the plain
  pool and a Conductor trained on it reads the same prompt.
- Rosters are drawn per (seed, iteration, question id), so a resumed run draws
  what a straight run drew; every size in the range is equally likely, then
  every subset of that size. The Conductor's own seat (`provider: conductor`) is
  in every roster and not counted in the size: it is the Conductor, not a worker.
- A plan is parsed against its roster: naming a number the roster does not list
  is a `PlanError` (reward 0), so no step reaches a worker the prompt did not list.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from conductor_rl.config import model_ids, seat_places
from conductor_rl.plan.language import Plan, Step

if TYPE_CHECKING:
    from conductor_rl.config import Config

T = TypeVar("T")


class RosterError(ValueError):
    """A roster that cannot be built from what was asked (unknown names, a bad size)."""


@dataclass(frozen=True)
class Roster:
    """`workers[i]` is the pool place of the worker the prompt lists as "Model `model_ids[i]`"."""

    workers: tuple[int, ...]
    ids: tuple[int, ...] | None = None  # the numbers the prompt gives them (None: 0..k-1 in roster order)
    descriptions: tuple[str, ...] | None = None  # worker_identity=description: shown after each number
    seat: int | None = None  # the roster place of the Conductor's own seat (provider: conductor), if listed

    def __post_init__(self) -> None:
        object.__setattr__(self, "workers", tuple(self.workers))
        if not self.workers:
            raise RosterError("a roster needs at least one worker")
        if len(set(self.workers)) != len(self.workers) or min(self.workers) < 0:
            raise RosterError(f"a roster lists distinct pool indices, got {list(self.workers)}")
        for name, values in (("ids", self.ids), ("descriptions", self.descriptions)):
            if values is not None and len(values) != len(self.workers):
                raise RosterError(f"a roster of {len(self.workers)} workers needs as many {name}, got {list(values)}")
        if self.ids is not None and len(set(self.ids)) != len(self.ids):
            raise RosterError(f"a roster numbers its workers distinctly, got {list(self.ids)}")

    @classmethod
    def full(cls, n_workers: int) -> Roster:
        return cls(tuple(range(n_workers)))

    def __len__(self) -> int:
        return len(self.workers)

    @property
    def model_ids(self) -> tuple[int, ...]:
        """The numbers the prompt lists, in roster order: what a plan's `model_id` may hold."""
        return tuple(range(len(self.workers))) if self.ids is None else self.ids

    def is_full(self, n_workers: int) -> bool:
        return self.workers == tuple(range(n_workers))

    def select(self, pool: Sequence[T]) -> list[T]:
        """The pool's members in roster order: what a parsed plan's steps index."""
        if max(self.workers) >= len(pool):
            raise RosterError(f"roster {list(self.workers)} names a worker past the pool's {len(pool)}")
        return [pool[i] for i in self.workers]

    def pool_id(self, model_id: int) -> int:
        """The pool index behind the roster's place `model_id` (a parsed plan's step)."""
        return self.workers[model_id]

    def pool_plan(self, plan: Plan) -> Plan:
        """The plan with pool indices for roster places (traces, metrics over the whole pool)."""
        return Plan(tuple(Step(self.pool_id(s.model_id), s.subtask, s.access) for s in plan.steps))

    def written_plan(self, plan: Plan) -> Plan:
        """The plan with the numbers the Conductor wrote for roster places (what the prompt named them)."""
        return Plan(tuple(Step(self.model_ids[s.model_id], s.subtask, s.access) for s in plan.steps))


def as_roster(listed: int | Roster) -> Roster:
    """A roster, or a number of workers listed as Model 0..n-1 (a pool without a roster)."""
    return Roster.full(listed) if isinstance(listed, int) else listed


def roster_for(config: Config, places: Sequence[int] | None = None) -> Roster:
    """The roster of the pool's workers at `places` (None: all of them), named as
    `conductor.worker_identity` says: the one place a roster is built from a configuration."""
    workers = config.workers
    places = tuple(range(len(workers))) if places is None else tuple(sorted(places))
    seat = next((places.index(p) for p in seat_places(workers) if p in places), None)
    if config.conductor.worker_identity == "description":
        described = tuple(workers[p].description or workers[p].name for p in places)
        return Roster(places, None, described, seat)
    numbers = model_ids(workers)
    return Roster(places, tuple(numbers[p] for p in places), None, seat)


def draw_roster(
    n_workers: int, size: tuple[int, int], seed: int, key: str, always: Sequence[int] = ()
) -> tuple[int, ...]:
    """The pool places of a roster of `size[0]..size[1]` workers (both included) out of
    `n_workers`, plus the places `always` listed (the Conductor's seat), the same for the
    same (seed, key): pass the iteration and question id as `key`."""
    low, high = size
    drawable = [i for i in range(n_workers) if i not in always]
    if not 1 <= low <= high <= len(drawable):
        raise RosterError(f"a roster size of {low}..{high} does not fit a pool of {len(drawable)} workers")
    digest = hashlib.sha256(f"roster|{seed}|{key}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    k = rng.randint(low, high)
    return tuple(sorted([*rng.sample(drawable, k), *always]))


def places_of(names: Sequence[str], pool_names: Sequence[str]) -> tuple[int, ...]:
    """The pool places of the named workers (a user's `--workers a,b`), in the pool's order."""
    unknown = [n for n in names if n not in pool_names]
    if unknown:
        raise RosterError(f"unknown worker(s) {', '.join(map(repr, unknown))}; the pool has: {', '.join(pool_names)}")
    if len(set(names)) != len(names):
        raise RosterError(f"a worker is named twice in {', '.join(names)}")
    return tuple(sorted(pool_names.index(n) for n in names))


def parse_worker_names(text: str) -> list[str]:
    """`--workers a,b, c` -> ['a', 'b', 'c']."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise RosterError("--workers names no worker; give comma-separated worker names")
    return names


def with_workers(config: Config, names: Sequence[str] | None) -> Config:
    """`config` offering the Conductor only the named workers (a user's subset), in the pool's
    order, each keeping the number it has in the whole pool (`model_id`): what `ask`, `evaluate`,
    `serve` and `Orchestrator` run with `--workers`. The Conductor's own seat stays listed. None:
    `config` unchanged."""
    if not names:
        return config
    pool = config.workers
    numbers = model_ids(pool)
    kept = [pool[i].model_copy(update={"model_id": numbers[i]}) for i in offered_places(config, names)]
    return config.model_copy(update={"workers": kept})


def offered_places(config: Config, names: Sequence[str]) -> tuple[int, ...]:
    """The pool places of a user's subset: the named workers and the Conductor's own seat
    (it is the Conductor, not a worker to choose). Raises RosterError for an unknown name."""
    named = places_of(list(names), [w.name for w in config.workers])
    return tuple(sorted(set(named) | set(seat_places(config.workers))))
