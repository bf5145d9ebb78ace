"""Simulated workers the tests share: one of given skill and price, and the plan-sensitive pool of
the embedded default (configs/local.yaml, described in docs/guide/simulator.md), read as
scripts/sim_optimum.py reads it."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

from conductor_rl.config import Price, SimSpec, WorkerConfig

REPO = Path(__file__).resolve().parent.parent


def sim_worker(
    name: str, price: tuple[float, float] = (1.0, 1.0), output_tokens: int = 100, **settings: object
) -> WorkerConfig:
    """A simulated worker; its accuracy is 0.5 on every domain unless `settings` say otherwise."""
    settings.setdefault("accuracy", {"default": 0.5})
    return WorkerConfig(
        name=name,
        provider="sim",
        price=Price(input=price[0], output=price[1]),
        sim=SimSpec(output_tokens=output_tokens, **settings),
    )


def sim_optimum_script() -> ModuleType:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import sim_optimum
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return sim_optimum


def guide_pool() -> list[WorkerConfig]:
    """The plan-sensitive pool of configs/local.yaml, which docs/guide/simulator.md describes."""
    script = sim_optimum_script()
    return script.read_pool(script.EMBEDDED)
