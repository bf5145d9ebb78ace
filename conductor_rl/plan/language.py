"""The plan language: read a Conductor completion into a validated workflow ``Plan``.

A completion is a sampled LLM text. Somewhere in it (after free-form reasoning,
inside a code fence or not, possibly after earlier drafts) are three Python
assignments::

    model_id = [2, 0]
    subtasks = ["Develop an algorithm ...", "Implement it in Python"]
    access_list = [[], "all"]

``parse_plan`` finds them, reads each value as a *literal* (never ``eval``) and
checks the result; anything wrong raises ``PlanError`` whose ``reason`` says what
and, where it helps, how to fix it. ``render_plan`` writes a ``Plan`` back as
those three lines, and ``parse_plan(render_plan(p)) == p``.

The text is untrusted (the policy explores freely, and may be cut off at the
token limit), so every step is bounded: the text's size, each value's size,
bracket depth and element count are capped before the Python compiler sees a
byte, and each character of the text is scanned about once, so no input can
make the parser slow, deep-recursing or memory-hungry.

Choices where the plan format is silent (the tests pin each one):

* Names are exact (``model_id``, ``subtasks``, ``access_list``) and must start a
  line (indentation allowed); ``foo_model_id = ...`` does not count.
* The last *complete* assignment of each name wins, name by name. One cut off by
  the end of the text, or left with an open bracket when the next assignment
  line starts, is an abandoned draft and is ignored. One that is complete but
  malformed (not a literal, junk after the closing bracket, bad syntax) still
  wins and makes the plan a ``PlanError``: the policy's final word is judged.
* After a list's closing bracket only a comment, a ``;`` or a closing code fence
  may follow on that line (``model_id = [1] + [2]`` is not a literal), or a comma,
  which makes the line a bare tuple as in Python.
* A tuple is read as a list anywhere (``(0, 1)``, ``model_id = 1, 2``).
* ``"all"`` in ``access_list`` may use either quote kind, any letter case and
  surrounding spaces (``"ALL"``, ``' all '``): no other meaning is possible.
  ``None``, ``"none"`` or a bare int are errors, not guessed at.
* Explicit access lists are de-duplicated and sorted; they stay lists even when
  they name every earlier step (``"all"`` and ``[0, 1]`` at step 2 differ only in
  spelling; ``Plan.visible`` gives both as ``[0, 1]``).
* Ids and indices must be real ints: ``True`` and ``1.0`` are rejected.
* Subtasks are kept verbatim (not stripped); a whitespace-only one is an error.
* Bad *arguments* (``n_workers < 1``, ``max_steps < 1``, non-str text) are caller
  bugs and raise ``ValueError``/``TypeError``, not ``PlanError``.
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

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

# Bounds on untrusted input. A Conductor completion is a few KB; these leave
# ample room (a 60k-token reasoning trace fits) while bounding the adversarial
# worst case: the scan is linear in brackets, quotes and commas.
MAX_TEXT_CHARS = 250_000  # whole completion
MAX_VALUE_CHARS = 100_000  # one assignment's value (five long subtasks fit)
MAX_DEPTH = 16  # bracket nesting; a valid plan needs 2
MAX_ELEMENTS = 1_000  # commas in one value; a valid plan needs a few dozen

NAMES = ("model_id", "subtasks", "access_list")

Access = Literal["all"] | list[int]


class PlanError(ValueError):
    """The completion does not hold a valid plan; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)  # args == (reason,): pickles (Ray) and prints
        self.reason = reason


@dataclass(frozen=True)
class Step:
    """One workflow step: worker ``model_id`` does ``subtask``, reading ``access``.

    ``access`` is ``"all"`` (every earlier step) or a list of earlier step
    indices (``[]``: none).
    """

    model_id: int
    subtask: str
    access: Access


@dataclass(frozen=True)
class Plan:
    """A validated workflow: its steps run in order; the last one answers."""

    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        # Accept a list from callers but store a tuple, so that Plan([s]) ==
        # Plan((s,)) and nobody mutates a parsed plan by accident.
        object.__setattr__(self, "steps", tuple(self.steps))

    def visible(self, i: int) -> list[int]:
        """Indices of the earlier steps whose subtask and answer step ``i`` reads."""
        if not 0 <= i < len(self.steps):
            raise IndexError(f"step {i} is not in a plan of {len(self.steps)} steps")
        access = self.steps[i].access
        return list(range(i)) if access == "all" else list(access)


# --------------------------------------------------------------------------- #
# Rendering
# --------------------------------------------------------------------------- #


def _quote(s: str) -> str:
    # repr() escapes everything unprintable (newlines, NUL, lone surrogates,
    # U+2028...), so the result is one line of valid Python. Prefer the paper's
    # double quotes when that needs no escaping change: if s has no '"', repr
    # only picks single quotes when s has no "'" either, so the body is unchanged.
    r = repr(s)
    if r[0] == "'" and '"' not in s:
        r = '"' + r[1:-1] + '"'
    return r


def _render_access(access: Access) -> str:
    if access == "all":
        return '"all"'
    return "[" + ", ".join(repr(j) for j in access) + "]"


def render_plan(plan: Plan) -> str:
    """The three assignment lines that ``parse_plan`` reads back to ``plan``."""
    steps = plan.steps
    return (
        "model_id = [" + ", ".join(repr(s.model_id) for s in steps) + "]\n"
        "subtasks = [" + ", ".join(_quote(s.subtask) for s in steps) + "]\n"
        "access_list = [" + ", ".join(_render_access(s.access) for s in steps) + "]"
    )


# --------------------------------------------------------------------------- #
# Finding the assignments
# --------------------------------------------------------------------------- #

# An assignment starts a line; `==` is a comparison, not an assignment.
_ASSIGN_RE = re.compile(r"^[ \t]*(model_id|subtasks|access_list)[ \t]*=(?!=)", re.MULTILINE)
# Characters that change the scanner's state; everything else is skipped in C.
_SIGNIFICANT_RE = re.compile(r"[\n\[\](){},#'\"]")
_BLANKS_RE = re.compile(r"[ \t]*")
# What may follow a list's closing bracket on its line.
_TRAILER_RE = re.compile(r"[ \t]*;?[ \t]*(?:#[^\n]*|`{3,}[ \t]*)?(?=\n|\Z)")
# String bodies, without the opening quote(s). A backslash escapes any one
# character (also in raw strings, as far as finding the end is concerned).
_SINGLE_BODY_RE = {q: re.compile(rf"(?:[^{q}\\\n]+|\\[\s\S])*") for q in "'\""}
_TRIPLE_BODY_RE = {q: re.compile(rf"(?:[^{q}\\]+|\\[\s\S]|{q}(?!{q}{q}))*") for q in "'\""}
_CLOSER = {"[": "]", "(": ")", "{": "}"}


def _match_end(pattern: re.Pattern[str], text: str, pos: int, endpos: int = sys.maxsize) -> int:
    """Where `pattern` (one that matches the empty string) stops matching from `pos`."""
    m = pattern.match(text, pos, endpos)
    assert m is not None, pattern.pattern
    return m.end()


# Outcomes of scanning one assignment's value.
_OK = "ok"  # complete; payload is the value's source text
_BAD = "bad"  # complete but malformed; payload is the PlanError reason
_CUT = "cut"  # abandoned draft (cut off by the end of text or the next assignment)


def _scan_value(text: str, start: int, name: str) -> tuple[str, int, str]:
    """Find where the value that begins at ``start`` (just after ``=``) ends.

    Returns ``(outcome, end, payload)``. Tracks strings, comments and brackets
    the way Python's tokenizer does, so ``"use list [1,2]"`` or a ``#`` comment
    inside a multi-line list do not confuse it; never looks further than
    ``MAX_VALUE_CHARS``.
    """
    n = len(text)
    limit = min(n, start + MAX_VALUE_CHARS)
    too_long = f"{name} is too long (over {MAX_VALUE_CHARS} characters)"

    def stopped() -> tuple[str, int, str]:
        # Ran out of text inside the value: truncated, unless the cap did it.
        return (_BAD, limit, too_long) if limit < n else (_CUT, n, "")

    pos = _match_end(_BLANKS_RE, text, start)
    # A value that opens with a bracket ends at its closing bracket; any other
    # value (an int, a call, a bare tuple) runs to the end of its logical line.
    bracketed = pos < n and text[pos] in "[("
    stack: list[str] = []
    commas = 0
    while True:
        m = _SIGNIFICANT_RE.search(text, pos, limit)
        if m is None:
            if limit < n:
                return _BAD, limit, too_long
            if stack or not text[start:].strip():
                return _CUT, n, ""  # open bracket or bare `name =` at the very end
            return _OK, n, text[start:]
        pos = m.start()
        c = text[pos]
        if c == "\n":
            if not stack:
                value = text[start:pos]
                if not value.strip():
                    return _BAD, pos, f"{name} has no value after '=' (write `{name} = [...]` on one line)"
                return _OK, pos, value
            # No literal can contain another assignment line: this draft was
            # abandoned with a bracket open, and a new attempt starts here.
            if _ASSIGN_RE.match(text, pos + 1):
                return _CUT, pos, ""
            pos += 1
        elif c in "([{":
            if len(stack) >= MAX_DEPTH:
                return _BAD, pos, f"{name} is nested too deeply (more than {MAX_DEPTH} levels of brackets)"
            stack.append(_CLOSER[c])
            pos += 1
        elif c in ")]}":
            if not stack or stack[-1] != c:
                return _BAD, pos, f"{name} has unbalanced brackets (unexpected {c!r})"
            stack.pop()
            pos += 1
            if not stack and bracketed:
                trailer = _TRAILER_RE.match(text, pos)
                if trailer is None and text.startswith(",", _match_end(_BLANKS_RE, text, pos)):
                    # `[], "all"` is a bare tuple: read on to the end of the line.
                    bracketed = False
                    continue
                if trailer is None:
                    line_end = text.find("\n", pos, pos + 200)
                    junk = text[pos : line_end if line_end != -1 else pos + 40].strip()[:40]
                    return (
                        _BAD,
                        pos,
                        f"unexpected text after the {name} list: {junk!r} "
                        "(only a comment may follow the closing bracket)",
                    )
                return _OK, trailer.end(), text[start:pos]
        elif c == ",":
            commas += 1
            if commas > MAX_ELEMENTS:
                return _BAD, pos, f"{name} has too many elements (over {MAX_ELEMENTS})"
            pos += 1
        elif c == "#":
            newline = text.find("\n", pos, limit)
            if newline == -1:
                if limit < n:
                    return _BAD, limit, too_long
                pos = n  # comment runs to the end of the text
            else:
                pos = newline  # the newline itself is handled on the next pass
        else:  # a quote opens a string
            triple = text.startswith(c * 3, pos)
            if triple:
                end = _match_end(_TRIPLE_BODY_RE[c], text, pos + 3, limit)
                if not text.startswith(c * 3, end):
                    return stopped()
                pos = end + 3
            else:
                end = _match_end(_SINGLE_BODY_RE[c], text, pos + 1, limit)
                if end < limit and text[end] == c:
                    pos = end + 1
                elif end < limit and text[end] == "\n":
                    return _BAD, end, f"{name} has a string that is not closed on its line"
                else:  # end of text, or a backslash as its last character
                    return stopped()


def _find_values(text: str) -> tuple[dict[str, tuple[str, str]], set[str]]:
    """The last complete value of each name, and the names that had a cut-off draft."""
    found: dict[str, tuple[str, str]] = {}
    cut: set[str] = set()
    skip_until = 0
    for m in _ASSIGN_RE.finditer(text):
        # A match inside the previous value (a line of a triple-quoted string)
        # is text, not an assignment.
        if m.start() < skip_until:
            continue
        name = m.group(1)
        outcome, end, payload = _scan_value(text, m.end(), name)
        if outcome == _CUT:
            cut.add(name)
            if end >= len(text):
                # Cut off by the end of the text: any later "assignment" lies
                # inside this value's open string or brackets (the scan would
                # have stopped at it otherwise), so, as for Python, it is text.
                # Stopping here also keeps the whole search linear.
                break
            continue
        found[name] = (outcome, payload)
        cut.discard(name)
        skip_until = end
    return found, cut


# --------------------------------------------------------------------------- #
# Reading literals
# --------------------------------------------------------------------------- #


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        return "a function call"
    if isinstance(node, ast.Name):
        return f"the name {node.id!r}"
    if isinstance(node, ast.JoinedStr):
        return "an f-string"
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return "a comprehension"
    if isinstance(node, (ast.Dict, ast.Set)):
        return "a dict or set"
    if isinstance(node, (ast.BinOp, ast.BoolOp, ast.Compare)):
        return "an expression with operators"
    if isinstance(node, ast.Starred):
        return "a starred expression"
    return f"an expression ({type(node).__name__})"


def _to_value(node: ast.AST, name: str) -> object:
    """Turn a literal's syntax tree into Python values, refusing anything else.

    Like ``ast.literal_eval`` but narrower (no dicts, sets or arithmetic), with
    tuples read as lists and a reason that names what was found. Recursion is
    bounded by ``MAX_DEPTH``: only lists and tuples nest.
    """
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_to_value(e, name) for e in node.elts]
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, (ast.USub, ast.UAdd))
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
        and not isinstance(node.operand.value, bool)
    ):
        v = node.operand.value
        return -v if isinstance(node.op, ast.USub) else v
    raise PlanError(
        f"{name} must be a plain literal, but it contains {_describe(node)}; "
        "write only numbers, quoted strings and lists"
    )


def _read_literal(source: str, name: str) -> object:
    try:
        # The tokenizer warns about things like invalid escapes ("\d") and, where
        # warnings are errors, turns them into SyntaxError. A subtask's odd
        # escape is not our problem to report (nor to spam logs with), so hush.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise PlanError(f"{name} is not valid Python: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - NUL bytes (ValueError), lone surrogates,
        # compiler recursion/memory limits: whatever the compiler refuses is a bad plan.
        raise PlanError(f"{name} could not be read: {type(exc).__name__}") from None
    return _to_value(tree.body, name)


# --------------------------------------------------------------------------- #
# Validation
# --------------------------------------------------------------------------- #


def _show(v: object) -> str:
    """A short description of a bad value for an error message."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return "a very large int"  # str() of a huge int can itself raise
    text = repr(v)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(v).__name__})"


def _num(v: int) -> str:
    """An int for an error message (already known to be an int)."""
    return str(v) if v.bit_length() <= 64 else "a very large int"


def _read_access(entry: object, i: int) -> Access:
    expected = f'access_list[{i}] must be [], "all" or a list of earlier step indices like [0, 2]'
    if isinstance(entry, str):
        if entry.strip().lower() == "all":
            return "all"
        raise PlanError(f"{expected}; got {_show(entry)}")
    if not isinstance(entry, list):
        raise PlanError(f"{expected}; got {_show(entry)}")
    seen: set[int] = set()
    for j in entry:
        if isinstance(j, bool) or not isinstance(j, int):
            raise PlanError(f"{expected}; it holds {_show(j)}, which is not a step index")
        if j < 0:
            raise PlanError(f"access_list[{i}] refers to step {_num(j)}: step indices are not negative")
        if j >= i:
            allowed = {0: "no earlier step (use [])", 1: "only step 0"}.get(i, f"only steps 0 to {i - 1}")
            raise PlanError(
                f"access_list[{i}] refers to step {_num(j)}, which is not an earlier step: step {i} may read {allowed}"
            )
        seen.add(j)
    return sorted(seen)


def _build_plan(
    values: dict[str, object], n_workers: int, max_steps: int, allow_empty: bool, ids: Sequence[int] | None = None
) -> Plan:
    for name in NAMES:
        if not isinstance(values[name], list):
            raise PlanError(f"{name} must be a list, got {_show(values[name])}")
    model_ids, subtasks, access_list = (values[name] for name in NAMES)
    assert isinstance(model_ids, list) and isinstance(subtasks, list) and isinstance(access_list, list)
    lengths = [len(model_ids), len(subtasks), len(access_list)]
    if len(set(lengths)) > 1:
        counts = ", ".join(f"{name} has {k}" for name, k in zip(NAMES, lengths))
        raise PlanError(f"the three lists must have one entry per step, but {counts}")
    n = lengths[0]
    if n == 0:
        if allow_empty:
            return Plan(())
        raise PlanError("the plan has no steps: model_id, subtasks and access_list are all empty")
    if n > max_steps:
        raise PlanError(f"the plan has {n} steps, but at most {max_steps} are allowed")
    steps = []
    for i in range(n):
        mid = model_ids[i]
        if isinstance(mid, bool) or not isinstance(mid, int):
            raise PlanError(f"model_id[{i}] must be an int worker id, got {_show(mid)}")
        if ids is not None:
            if mid not in ids:
                raise PlanError(f"model_id[{i}] is {_num(mid)}: the listed models are {', '.join(map(str, ids))}")
            mid = list(ids).index(mid)  # the roster's place of the worker the prompt numbered `mid`
        elif not 0 <= mid < n_workers:
            raise PlanError(f"model_id[{i}] is {_num(mid)}, not a worker id: ids run from 0 to {n_workers - 1}")
        subtask = subtasks[i]
        if not isinstance(subtask, str):
            raise PlanError(f"subtasks[{i}] must be a string, got {_show(subtask)}")
        if not subtask.strip():
            raise PlanError(f"subtasks[{i}] is empty: every step needs a subtask")
        steps.append(Step(model_id=mid, subtask=subtask, access=_read_access(access_list[i], i)))
    return Plan(tuple(steps))


# --------------------------------------------------------------------------- #
# Entry point
# --------------------------------------------------------------------------- #


def parse_plan(
    text: str, n_workers: int, max_steps: int = 5, *, allow_empty: bool = False, ids: Sequence[int] | None = None
) -> Plan:
    """Read the plan in a Conductor completion, or raise ``PlanError`` saying why not.

    ``n_workers``: worker ids run from 0 to ``n_workers - 1``. ``max_steps``: the
    most steps a plan may have. ``allow_empty``: three empty lists mean "stop"
    and give a plan with no steps (otherwise they are an error). ``ids``: the
    numbers the prompt gave the workers, in roster order (a roster's
    ``model_ids``; None: 0 to ``n_workers - 1``): the plan may name only those,
    and its steps hold each worker's place in the roster, not its number.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if n_workers < 1 or max_steps < 1:
        raise ValueError(f"n_workers and max_steps must be at least 1, got {n_workers} and {max_steps}")
    if len(text) > MAX_TEXT_CHARS:
        raise PlanError(f"the completion is too long ({len(text)} characters; the limit is {MAX_TEXT_CHARS})")
    if "\r" in text:  # Python reads \r\n and \r as line ends; so do we
        text = text.replace("\r\n", "\n").replace("\r", "\n")

    found, cut = _find_values(text)
    missing = [name for name in NAMES if name not in found]
    if missing:
        listed = ", ".join(f"`{name} = [...]`" for name in missing)
        cut_note = [name for name in missing if name in cut]
        note = f" ({', '.join(cut_note)} looks cut off)" if cut_note else ""
        raise PlanError(f"missing {listed}: no complete assignment at the start of a line{note}")
    values: dict[str, object] = {}
    for name in NAMES:
        outcome, payload = found[name]
        if outcome == _BAD:
            raise PlanError(payload)
        values[name] = _read_literal(payload, name)
    if ids is not None and len(ids) != n_workers:
        raise ValueError(f"{len(ids)} ids for {n_workers} workers: give one id per listed worker")
    return _build_plan(values, n_workers, max_steps, allow_empty, ids)
