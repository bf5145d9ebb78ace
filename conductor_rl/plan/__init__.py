"""The plan: the language the Conductor writes (`language`), the shape a sampled
plan must have (`shape`), sampling constrained to it (`constrained`), and the
prompts that ask for it (`prompts`).

The plan language's public names are re-exported here:
`from conductor_rl.plan import parse_plan, PlanError`.
"""

from conductor_rl.plan.language import (
    MAX_DEPTH,
    MAX_ELEMENTS,
    MAX_TEXT_CHARS,
    MAX_VALUE_CHARS,
    NAMES,
    Plan,
    PlanError,
    Step,
    parse_plan,
    render_plan,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "MAX_TEXT_CHARS",
    "MAX_VALUE_CHARS",
    "NAMES",
    "Plan",
    "PlanError",
    "Step",
    "parse_plan",
    "render_plan",
]
