"""How hard a question is, on a coarse scale from 0 (easiest) to 1 (hardest).

The scale is used by the simulated workers (conductor_rl/workers/sim_rules.py: a simulated
worker's skill falls from its `accuracy` at 0 to its `hard_accuracy` at 1) and by reports
that split results by difficulty. It is an ordering of the benchmarks, not a measurement:

==============================================  ===============================
question                                        difficulty
==============================================  ===============================
MATH, MATH-500 (``meta["level"]`` 1..5)         (level - 1) / 4
LiveCodeBench (``meta["difficulty"]``)          easy 0.25, medium 0.5, hard 0.75
GSM8K                                           0.1
MMLU                                            0.2
HumanEval                                       0.3
RLPR                                            0.5
BigCodeBench                                    0.7
GPQA                                            0.9
AIME (any source starting with ``aime``)        1.0
anything else, or a level the row lacks         0.5
==============================================  ===============================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: From this difficulty up a question counts as hard (`is_hard`).
HARD_FROM = 0.5
#: The difficulty of a question nothing is known about: the middle of the scale.
UNKNOWN = 0.5

_BY_SOURCE = {
    "gsm8k": 0.1,
    "mmlu": 0.2,
    "humaneval": 0.3,
    "rlpr": 0.5,
    "bigcodebench": 0.7,
    "gpqa": 0.9,
}
_LEVELLED = ("math", "math500")
_LCB = {"easy": 0.25, "medium": 0.5, "hard": 0.75}


def difficulty_of(source: str, meta: Mapping[str, Any]) -> float:
    """The difficulty of a question of `source` (`Question.source`) with `meta` (`Question.meta`),
    by the table in this module's docstring."""
    if source in _LEVELLED:
        level = meta.get("level")  # conductor_rl/data/math.py writes an int, or None for "Level ?"
        if isinstance(level, int) and not isinstance(level, bool) and 1 <= level <= 5:
            return (level - 1) / 4
        return UNKNOWN
    if source == "livecodebench":
        label = meta.get("difficulty")
        return _LCB.get(label.strip().lower(), UNKNOWN) if isinstance(label, str) else UNKNOWN
    if source.startswith("aime"):
        return 1.0
    return _BY_SOURCE.get(source, UNKNOWN)


def is_hard(difficulty: float) -> bool:
    """Whether a question of this difficulty counts as hard in reports."""
    return difficulty >= HARD_FROM


def band_of(difficulty: float | None) -> str:
    """A question's difficulty band in reports: "easy", "hard", or "unknown" where none was recorded."""
    if difficulty is None:
        return "unknown"
    return "hard" if is_hard(difficulty) else "easy"
