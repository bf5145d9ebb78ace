"""The ``\\boxed{...}`` answer notation: where a LaTeX text states its final answer.

Both ends of the pipeline read it: the data loaders take a MATH solution's
reference answer from its final box (conductor_rl/data/math.py), and the graders
take a response's answer from its boxes (conductor_rl/grading/answers.py). It sits
in `data`, the lower of the two stages.
"""

from __future__ import annotations

import re

_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)  # \x escapes x: \{ does not count, \\{ does
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOX_BARE = re.compile(r"\\boxed[ \t]+([^\s{$\\][^\s$]*)")


def _closing_braces(text: str) -> dict[int, int]:
    """Map the index of every '{' to that of its matching '}' (one O(n) pass)."""
    stack: list[int] = []
    match: dict[int, int] = {}
    for m in _BRACE_TOKEN.finditer(text):
        tok = m.group()
        if tok == "{":
            stack.append(m.start())
        elif tok == "}" and stack:
            match[stack.pop()] = m.start()
    return match


def all_boxed(text: str, keep_unclosed: bool = False) -> list[tuple[int, str | None]]:
    """Every complete ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed x`` as (position, content).

    An unclosed box (truncated output) is left out, or listed with content None
    when `keep_unclosed`. The brace-less form ends at whitespace or ``$`` and
    drops a sentence's final period (``\\boxed 5.`` is 5).
    """
    found: list[tuple[int, str | None]] = []
    if "\\boxed" not in text and "\\fbox" not in text:
        return found
    opens = list(_BOX_OPEN.finditer(text))
    if opens:
        closing = _closing_braces(text)
        for m in opens:
            brace = m.end() - 1
            end = closing.get(brace)
            if end is not None:
                found.append((m.start(), text[brace + 1 : end].strip()))
            elif keep_unclosed:
                found.append((m.start(), None))
    for m in _BOX_BARE.finditer(text):
        found.append((m.start(), m.group(1).strip().rstrip(".")))
    found.sort(key=lambda pc: pc[0])
    return found


def last_boxed(text: str, skip_unclosed: bool = True) -> str | None:
    """The content of the last complete ``\\boxed{...}`` (balanced braces), or None.

    ``\\fbox{...}`` and the brace-less ``\\boxed 5`` count too. An unclosed box
    (a truncated response) is skipped in favour of an earlier complete one; with
    ``skip_unclosed=False`` the last box decides, and an unclosed one gives None
    (a reference solution's answer is its final box, never an earlier step).
    """
    found = all_boxed(text, keep_unclosed=not skip_unclosed)
    return found[-1][1] if found else None
