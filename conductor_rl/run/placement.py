"""Will the job's actors fit on the cluster? Decided before the first one starts.

Ray places an actor on one node that holds every resource it asks for, and an
actor that no node can take does not fail: it waits, with no error, until a
node that fits joins (which an autoscaler may or may not ever add). A job whose
learner ranks wait so sits at "starting 1 learner rank(s)" for as long as one
lets it. This module answers the question from numbers alone (no Ray here;
jobs/training_system.py gathers them):

- `Demand`: what the job starts (generator engines, learner ranks, worker
  replicas, graders, served-worker replicas): resources per actor, how many,
  and the settings that set them.
- `Node`: a node's total resources; or an autoscaler's node type, with how many
  more of it may be added (`live=False`).
- `check_fit`: first-fit decreasing per node (an actor cannot span nodes). Every
  demand is held at once: the actors of a run live for the whole run. Learner
  ranks form one PACK placement group (actors/learner.py), which may spread
  over nodes, so each rank is its own item here too. The result is a
  `FitReport`: asked vs available per resource, what found no room, and the
  settings that would make it fit, including, where only CPUs are short, how to
  fit by sharing them (Ray's CPUs are bookkeeping, not cores, and the phases of
  an iteration run one after another).
- `require_fit`: the same, raising `ClusterTooSmallError` with that report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

#: Ray keeps resource amounts in fixed point, to 1/10000 of a unit: so does the packing.
UNIT = 10_000
#: Per-actor CPU amounts suggested when the job must share CPUs (the largest that fits is taken).
NICE_CPUS = (0.5, 0.25, 0.2, 0.1, 0.05, 0.02, 0.01)
FitMode = Literal["refuse", "warn", "off"]


class ClusterTooSmallError(RuntimeError):
    """The cluster's nodes cannot hold every actor the job starts; the message gives the numbers
    (asked vs available per resource) and the settings to change."""


@dataclass(frozen=True)
class Demand:
    """`count` actors of one kind, each asking `per_actor`."""

    what: str  # "learner rank"
    per_actor: Mapping[str, float]
    count: int
    count_key: str | None = None  # the setting that sets how many: "learner.world_size"
    count_value: int | None = None  # its value; count / count_value actors per unit of it
    resources_key: str | None = None  # the setting that holds per_actor: "cluster.learner"
    scalar_cpu: bool = False  # resources_key names a CPU number (serve.cpus), not a mapping

    def asks(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.per_actor.items() if v > 0}


@dataclass(frozen=True)
class Node:
    """A node of the cluster (`live`), or a node type an autoscaler may add `count` of (None: no cap)."""

    name: str
    resources: Mapping[str, float]
    head: bool = False
    live: bool = True
    count: int | None = 1


@dataclass
class FitReport:
    demands: list[Demand]
    nodes: list[Node]
    fits: bool
    unplaced: dict[str, int] = field(default_factory=dict)  # demand -> actors no node could take
    added: dict[str, int] = field(default_factory=dict)  # node type -> nodes an autoscaler must add
    needed: list[str] = field(default_factory=list)  # fixes that each must be made
    fixes: list[str] = field(default_factory=list)  # then any one of these
    may_grow: bool = False  # an autoscaler of unknown node types runs

    @property
    def asked(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for d in self.demands:
            for key, value in d.asks().items():
                total[key] = total.get(key, 0.0) + value * d.count
        return total

    @property
    def available(self) -> dict[str, float]:
        """What the live nodes have, for each resource asked."""
        return {key: sum(n.resources.get(key, 0.0) for n in self.nodes if n.live) for key in self.asked}

    def summary(self) -> str:
        """One line: asked vs available per resource."""
        avail = self.available
        return ", ".join(f"{key} {_num(v)} of {_num(avail[key])}" for key, v in self.asked.items())

    def message(self) -> str:
        live = [n for n in self.nodes if n.live]
        head = (
            "the cluster cannot hold every actor this job starts: Ray would keep those that find no node "
            'waiting, with no error (docs/guide/cluster.md, "Will it fit?").'
        )
        lines = [head, "Asked (all at once, for the whole run):"]
        width = max((len(d.what) for d in self.demands), default=0)
        for d in self.demands:
            if d.count:
                keys = ", ".join(k for k in (d.count_key, d.resources_key) if k)
                lines.append(f"  {d.what:<{width}}  {d.count} x {_fmt(d.asks())}" + (f"   ({keys})" if keys else ""))
        avail = self.available
        lines.append("Per resource, asked / on the live nodes / the largest node:")
        for key, value in self.asked.items():
            largest = max((n.resources.get(key, 0.0) for n in live), default=0.0)
            lines.append(f"  {key}: {_num(value)} / {_num(avail[key])} / {_num(largest)}")
        kinds: dict[str, int] = {}  # identical nodes once, with their number
        for n in live:
            kind = ("head " if n.head else "") + _fmt(_relevant(n.resources, self.asked))
            kinds[kind] = kinds.get(kind, 0) + 1
        lines.append(
            f"Live nodes ({len(live)}): " + "; ".join(f"{k}" if c == 1 else f"{c} x {k}" for k, c in kinds.items())
        )
        types = [n for n in self.nodes if not n.live]
        if types:
            lines.append(
                "An autoscaler may add: "
                + "; ".join(
                    f"{'any number' if n.count is None else n.count} x {n.name} "
                    f"{_fmt(_relevant(n.resources, self.asked))}"
                    for n in types
                )
            )
        if self.unplaced:
            lines.append("No node for: " + ", ".join(f"{n} x {what}" for what, n in self.unplaced.items()))
        if self.needed:
            lines.append("Needed:")
            lines += [f"  - {fix}" for fix in self.needed]
        if self.fixes:
            lines.append(("Then any" if self.needed else "Fix, any") + " one of:")
            lines += [f"  - {fix}" for fix in self.fixes]
        if self.may_grow:
            lines.append(
                "An autoscaler runs whose node types Ray does not report to the job, so the job starts "
                "anyway: what finds no node waits for what the autoscaler adds, if it adds nodes that fit "
                "(cluster.fit_check=off silences this warning)."
            )
        return "\n".join(lines)


def check_fit(demands: Sequence[Demand], nodes: Sequence[Node], may_grow: bool = False) -> FitReport:
    """Whether every actor of `demands` finds a node at once; with the fixes when not."""
    demands = [d for d in demands if d.count > 0]
    unplaced, added = _pack(demands, nodes)
    report = FitReport(list(demands), list(nodes), fits=not unplaced, unplaced=unplaced, added=added, may_grow=may_grow)
    if unplaced:
        report.needed, report.fixes = _fixes(demands, list(nodes))
    return report


def require_fit(
    demands: Sequence[Demand], nodes: Sequence[Node], may_grow: bool = False, mode: FitMode = "refuse"
) -> FitReport | None:
    """`check_fit`, raising ClusterTooSmallError when the job cannot fit and nothing else could make
    it fit (mode "refuse" and no autoscaler of unknown node types). Returns the report (None: mode off)."""
    if mode == "off":
        return None
    report = check_fit(demands, nodes, may_grow)
    if not report.fits and mode == "refuse" and not may_grow:
        raise ClusterTooSmallError(report.message())
    return report


# ---------------------------------------------------------------- packing


def _units(resources: Mapping[str, float]) -> dict[str, int]:
    return {k: round(v * UNIT) for k, v in resources.items() if v > 0}


def _pack(demands: Sequence[Demand], nodes: Sequence[Node]) -> tuple[dict[str, int], dict[str, int]]:
    """First-fit decreasing: (actors left without a node per demand, nodes added per node type)."""
    items = [(d.what, _units(d.asks())) for d in demands for _ in range(d.count)]
    bins: list[tuple[Node, dict[str, int]]] = []
    for node in sorted(nodes, key=lambda n: not n.live):  # live nodes first, then what an autoscaler may add
        copies = node.count if node.count is not None else len(items)
        bins += [(node, _units(node.resources)) for _ in range(copies)]
    largest: dict[str, int] = {}
    for _, free in bins:
        for key, value in free.items():
            largest[key] = max(largest.get(key, 0), value)

    def size(item: tuple[str, dict[str, int]]) -> tuple[float, float]:
        shares = [v / largest[k] if largest.get(k) else math.inf for k, v in item[1].items()] or [0.0]
        return max(shares), sum(shares)

    unplaced: dict[str, int] = {}
    opened: set[int] = set()
    added: dict[str, int] = {}
    for what, need in sorted(items, key=size, reverse=True):
        for i, (node, free) in enumerate(bins):
            if all(free.get(k, 0) >= v for k, v in need.items()):
                for k, v in need.items():
                    free[k] -= v
                if not node.live and i not in opened:
                    opened.add(i)
                    added[node.name] = added.get(node.name, 0) + 1
                break
        else:
            unplaced[what] = unplaced.get(what, 0) + 1
    return unplaced, added


def _fits(demands: Sequence[Demand], nodes: Sequence[Node]) -> bool:
    return not _pack(demands, nodes)[0]


# ---------------------------------------------------------------- fixes


def _fixes(demands: list[Demand], nodes: list[Node]) -> tuple[list[str], list[str]]:
    """(what must change in any case: resources no node has, actors bigger than any node; then the
    alternatives: sharing CPUs, fewer actors, more nodes)."""
    needed: list[str] = []
    fixes: list[str] = []
    everywhere = {k for n in nodes for k, v in n.resources.items() if v > 0}
    missing = {k for d in demands for k in d.asks() if k not in everywhere}
    for key in sorted(missing):
        needed.append(_missing_fix(key, [d for d in demands if key in d.asks()]))
    for d in demands:
        need = _units(d.asks())
        if any(k in missing for k in need):
            continue
        if not any(all(_units(n.resources).get(k, 0) >= v for k, v in need.items()) for n in nodes):
            largest = {k: max(n.resources.get(k, 0.0) for n in nodes) for k in d.asks()}
            needed.append(
                f"one {d.what} asks {_fmt(d.asks())}, more than any single node has ({_fmt(largest)}): "
                f"lower {d.resources_key or 'its resources'}, or add a node that big"
            )
    if not missing and _fits(_without(demands, "CPU"), nodes):
        fixes += _cpu_fixes(demands, nodes)  # only CPUs are short: share them
    fixes += _fewer_actors(demands, nodes)
    short = {k: v for k, v in _shortfall(demands, nodes).items() if k not in missing}
    unplaced = _pack(demands, nodes)[0]
    if short or unplaced:
        room = "; ".join(f"{n} x {d.what} {_fmt(d.asks())}" for d in demands if (n := unplaced.get(d.what)))
        fixes.append(
            "add nodes" + (f" ({_fmt(short)} more in all)" if short else "") + f" that can take {room} "
            f"(`ray start --address=HEAD:6379 ...` on more machines, or a larger max_workers of the "
            f"node type in ray_cluster.yaml)"
        )
    return needed, fixes


def _missing_fix(key: str, askers: list[Demand]) -> str:
    whats = ", ".join(dict.fromkeys(d.what for d in askers))
    if key == "GPU":
        moves = " ".join(
            _override(
                d,
                {**{k: v for k, v in d.asks().items() if k != "GPU"}, "CPU": max(d.asks().get("CPU", 0.0), 1.0)},
                gpu_off=True,
            )
            for d in askers
            if d.resources_key
        )
        return (
            f"no node has a GPU, which each of these asks for: {whats}. Join a cluster with GPU nodes, or "
            f"run them on CPUs (slow): {moves}"
        )
    keys = ", ".join(
        dict.fromkeys(
            f"{d.resources_key}.resources" if d.scalar_cpu else d.resources_key for d in askers if d.resources_key
        )
    )
    return (
        f"no node declares the resource `{key}`, which each of these asks for: {whats}. Start nodes that declare it "
        f"(`ray start ... --resources='{{\"{key}\": 1}}'`, or a node type of ray_cluster.yaml with it in "
        f"`resources:`), or remove `{key}` from {keys or 'their resources'}"
    )


def _cpu_fixes(demands: list[Demand], nodes: list[Node]) -> list[str]:
    fixes: list[str] = []
    why = (
        "share CPUs: the phases of an iteration take turns (sampling, worker calls, grading, the learner "
        "step) and Ray's CPUs are bookkeeping, not cores"
    )
    grown = _more_cpus(demands, nodes)
    if grown is not None:
        node, cpus = grown
        command = (
            f"ray start --head --num-cpus {cpus}" if node.head else f"ray start --address=HEAD:6379 --num-cpus {cpus}"
        )
        fixes.append(
            f"{why}, so declare more logical CPUs than cores: start {node.name} with `{command}` "
            f"(now CPU {_num(node.resources.get('CPU', 0.0))}; its other flags as before)"
        )
        why = "share the CPUs there are"
    scaled = _fewer_cpus(demands, nodes)
    if scaled:
        fixes.append(f"{why}, asking for fewer logical CPUs per actor: " + " ".join(scaled))
    return fixes


def _more_cpus(demands: list[Demand], nodes: list[Node]) -> tuple[Node, int] | None:
    """The live node whose CPU count, raised least, makes everything fit: (node, its new CPU count).
    A node that declares no CPU (ray_cluster.yaml's head) was set so on purpose: it is not offered."""
    best: tuple[Node, int] | None = None
    ceiling = math.ceil(sum(d.asks().get("CPU", 0.0) * d.count for d in demands))
    for i, node in enumerate(nodes):
        if not node.live or node.resources.get("CPU", 0.0) <= 0:
            continue
        now = node.resources.get("CPU", 0.0)

        def fits_with(cpus: int, node: Node = node, i: int = i) -> bool:  # bound now: called in this iteration only
            changed = Node(node.name, {**node.resources, "CPU": float(cpus)}, node.head, node.live, node.count)
            return _fits(demands, nodes[:i] + [changed] + nodes[i + 1 :])

        low, high = math.floor(now), math.ceil(now) + ceiling
        if not fits_with(high):
            continue
        while high - low > 1:  # fits_with(high), not fits_with(low)
            mid = (low + high) // 2
            low, high = (low, mid) if fits_with(mid) else (mid, high)
        if best is None or high - now < best[1] - best[0].resources.get("CPU", 0.0):
            best = (node, high)
    return best


def _fewer_cpus(demands: list[Demand], nodes: list[Node]) -> list[str]:
    """Overrides that scale every actor's CPU down by one factor (rounded to a NICE_CPUS amount) until it fits."""
    asking = [d for d in demands if d.asks().get("CPU", 0.0) > 0 and d.resources_key]

    def scaled(factor: float) -> list[Demand]:
        out = []
        for d in demands:
            cpu = d.asks().get("CPU", 0.0)
            if d in asking:
                d = _with_cpu(d, _nice_floor(cpu * factor))
            out.append(d)
        return out

    low, high = 0.0, 1.0  # fits at low (checked below), not at high
    if not _fits(scaled(low), nodes):
        return []
    for _ in range(20):
        mid = (low + high) / 2
        low, high = (mid, high) if _fits(scaled(mid), nodes) else (low, mid)
    chosen = scaled(low)
    return [
        _override(new, new.asks())
        for old, new in zip(demands, chosen)
        if old in asking and new.asks().get("CPU") != old.asks().get("CPU")
    ]


def _fewer_actors(demands: list[Demand], nodes: list[Node]) -> list[str]:
    """For each demand with a count setting: its largest smaller value that fits, the others unchanged."""
    fixes = []
    for i, d in enumerate(demands):
        if not d.count_key or not d.count_value or d.count_value <= 1:
            continue
        per_unit = d.count / d.count_value

        def fits_with(value: int, d: Demand = d, i: int = i, per_unit: float = per_unit) -> bool:  # bound now
            changed = Demand(
                d.what, d.per_actor, math.ceil(value * per_unit), d.count_key, value, d.resources_key, d.scalar_cpu
            )
            return _fits(demands[:i] + [changed] + demands[i + 1 :], nodes)

        if not fits_with(1):
            continue
        low, high = 1, d.count_value  # fits_with(low), not fits_with(high)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if fits_with(mid) else (low, mid)
        fixes.append(f"fewer actors: {d.count_key}={low} (now {d.count_value})")
    return fixes


def _shortfall(demands: Sequence[Demand], nodes: Sequence[Node]) -> dict[str, float]:
    asked: dict[str, float] = {}
    for d in demands:
        for key, value in d.asks().items():
            asked[key] = asked.get(key, 0.0) + value * d.count
    have = {k: sum(n.resources.get(k, 0.0) * (n.count or 0) for n in nodes) for k in asked}
    return {k: round(v - have[k], 4) for k, v in asked.items() if v - have[k] > 1e-9}


# ---------------------------------------------------------------- helpers


def _without(demands: Iterable[Demand], key: str) -> list[Demand]:
    return [
        Demand(
            d.what,
            {k: v for k, v in d.per_actor.items() if k != key},
            d.count,
            d.count_key,
            d.count_value,
            d.resources_key,
            d.scalar_cpu,
        )
        for d in demands
    ]


def _with_cpu(d: Demand, cpu: float) -> Demand:
    return Demand(
        d.what, {**d.per_actor, "CPU": cpu}, d.count, d.count_key, d.count_value, d.resources_key, d.scalar_cpu
    )


def _nice_floor(cpu: float) -> float:
    if cpu >= 1.0:
        return float(math.floor(cpu))
    return next((v for v in NICE_CPUS if v <= cpu + 1e-12), NICE_CPUS[-1])


def _override(d: Demand, resources: Mapping[str, float], gpu_off: bool = False) -> str:
    """The command-line override that sets `d`'s per-actor resources to `resources`."""
    if d.scalar_cpu:  # a served worker: workers.<i>.serve.cpus / .gpus
        text = f"{d.resources_key}.cpus={_num(resources.get('CPU', 0.0))}"
        return text + (f" {d.resources_key}.gpus=0" if gpu_off else "")
    return f"{d.resources_key}='{_fmt(resources)}'"


def _relevant(resources: Mapping[str, float], asked: Mapping[str, float]) -> dict[str, float]:
    """The node's amounts of what the job asks for; its CPUs always (Ray lists no CPU key for CPU 0)."""
    return {**({"CPU": 0.0} if "CPU" in asked else {}), **{k: v for k, v in resources.items() if k in asked}}


def _num(value: float) -> str:
    return f"{round(value, 4):g}"


def _fmt(resources: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {_num(v)}" for k, v in resources.items()) + "}"


__all__ = ["ClusterTooSmallError", "Demand", "FitMode", "FitReport", "Node", "check_fit", "require_fit"]
