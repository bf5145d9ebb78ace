"""conductor-rl: train a Conductor LLM with GRPO to orchestrate worker LLMs.

The public entry point is `conductor_rl.Orchestrator` (conductor_rl/orchestrator.py);
it is loaded on first use, so `import conductor_rl` stays light.
"""

from __future__ import annotations

from typing import Any

_LAZY = {"Orchestrator", "Answer", "AnswerStep", "BudgetSpentError"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from conductor_rl import orchestrator

        return getattr(orchestrator, name)
    raise AttributeError(f"module 'conductor_rl' has no attribute {name!r}")
