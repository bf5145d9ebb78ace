"""Code graders: run a worker's program against the question's tests in the sandbox.

Kinds (the tests travel in the question's ``meta``):

* ``code_humaneval``: HumanEval; ``meta`` has ``prompt``, ``test`` (defining
  ``check``) and ``entry_point``.
* ``code_stdio``: LiveCodeBench stdin/stdout problems; ``meta["tests"]`` is a
  list of ``{"input": str, "output": str}``; each test is one run, with the
  per-test timeout ``meta.get("timeout_s")``; outputs are compared line by line
  on whitespace-separated tokens (numbers within 1e-6).
* ``code_call``: LiveCodeBench call-based problems; ``meta["fn_name"]``, an
  optional ``starter_code``, and ``tests`` whose ``input`` is one JSON value per
  line (the arguments) and ``output`` one JSON value. ``Solution().fn_name``
  is called if the program defines ``class Solution``, else the function.
* ``code_unittest``: BigCodeBench; ``meta["test"]`` is a ``unittest`` module
  text, ``meta.get("prompt")`` the code prompt (its imports and signature).

Verdicts: every test passes → CORRECT; no code, a syntax error, a crash, a
timeout, a failed test, too much output → WRONG; the sandbox failing to start,
missing tests in ``meta`` or a bug here → ERROR (never scored).

A program that exits early with status 0 (``sys.exit(0)`` before the tests
run) must not pass: the harness reads a random token from stdin before the
program runs and prints it only after the last test, and a run counts as passed
only if that token ends its output. (A program can still find the token in its
own interpreter's memory; this stops accidental and naive exits, not a
determined attack on the harness.)
"""

from __future__ import annotations

import ast
import json
import math
import re
import secrets
from collections.abc import Mapping
from typing import Any

from conductor_rl.grading.answers import strip_reasoning
from conductor_rl.grading.sandbox import Sandbox, SandboxError, SandboxResult
from conductor_rl.grading.verdict import GradeResult, Verdict

__all__ = [
    "CODE_KINDS",
    "default_sandbox",
    "extract_code",
    "grade_code",
    "humaneval_program",
    "outputs_match",
]

CODE_KINDS = ("code_humaneval", "code_stdio", "code_call", "code_unittest")
MAX_SHOWN_CODE = 20_000
"""`GradeResult.extracted` keeps at most this many characters of the program."""

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
_OPEN_FENCE = re.compile(r"^[ \t]*```[ \t]*(python3?|py)?[ \t]*\n", re.MULTILINE | re.IGNORECASE)
_PYTHON_TAGS = {"python", "python3", "py"}
_CODE_START = re.compile(r"^(?:def |class |import |from \S+ import |@|async def |if __name__)")


def extract_code(response: str) -> str | None:
    """The program in a worker's answer, or None if there is none.

    Precedence: the last complete fenced block tagged python/py (or untagged when
    no block is tagged python; blocks in other languages are ignored); then an
    unclosed python fence (a cut-off answer: everything after it); then the
    whole text when it parses as Python (or as an indented function body);
    then the text from the first line that
    starts like code (``def``, ``class``, ``import``, ...), with prose lines at
    the end dropped until it parses.
    """
    text = strip_reasoning(response)
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    tagged = [body for tag, body in blocks if tag in _PYTHON_TAGS]
    untagged = [body for tag, body in blocks if not tag]
    for body in reversed(tagged or untagged):
        if body.strip():
            return body
    if not blocks:
        opened = list(_OPEN_FENCE.finditer(text))
        if opened:
            body = text[opened[-1].end() :]
            return body if body.strip() else None
    if not text.strip():
        return None
    if _parses(text) or (text[:1] in " \t" and _parses("def _body():\n" + text)):
        return text  # a whole program, or an indented function body (a HumanEval-style completion)
    lines = text.splitlines()
    first = next((i for i, ln in enumerate(lines) if _CODE_START.match(ln)), None)
    if first is None:
        return None
    for last in range(len(lines), first, -1):
        candidate = "\n".join(lines[first:last])
        if _parses(candidate):
            return candidate + "\n"
    return "\n".join(lines[first:]) + "\n"  # a syntax error is the program's: it fails when run


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _defines(code: str, name: str) -> bool:
    """Whether `code` defines a top-level function or class `name` (False if it does not parse)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return bool(re.search(rf"^(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", code, re.MULTILINE))
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name
        for node in tree.body
    )


# ---------------------------------------------------------------------------
# harness pieces

# Reads the token before the program runs; `_crl_finish` prints it after the tests.
_HEAD = (
    "def _crl_finish(_token=__import__('sys').stdin.readline().strip(), _os=__import__('os'), "
    "_sys=__import__('sys')):\n"
    "    try:\n"
    "        _sys.stdout.flush()  # the program's buffered prints must come before the token\n"
    "    except Exception:\n"
    "        pass\n"
    "    _os.write(1, ('\\n' + _token + '\\n').encode())\n"
)
_FINISH = "\n_crl_finish()\n"


def _passed(result: SandboxResult, token: str) -> bool:
    return result.ok and result.stdout.rstrip("\n").rsplit("\n", 1)[-1] == token


def _failure(result: SandboxResult) -> str:
    if result.timed_out:
        return f"timed out after {result.wall_s:.1f}s"
    if result.killed_by == "output_limit":
        return "killed: too much output"
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-1:] or [""]
        return f"exit status {result.returncode}: {tail[0][:300]}"
    return "the tests did not run to the end"


def _program_with_prompt(code: str, prompt: str, entry_point: str) -> str:
    """The prompt (imports, helpers, signature) followed by the answer.

    An answer that defines the entry point replaces the prompt's stub (a
    docstring-only function); one that does not is taken as the body of the
    prompt's last function."""
    if not prompt:
        return code
    if _defines(code, entry_point):
        return prompt.rstrip() + "\n\n" + code
    return prompt + code


def _shown(code: str) -> str:
    return code[:MAX_SHOWN_CODE]


def _need(meta: Mapping[str, Any], *keys: str) -> None:
    missing = [k for k in keys if not meta.get(k)]
    if missing:
        raise ValueError(f"question meta lacks {missing} (have {sorted(meta)})")


# ---------------------------------------------------------------------------
# graders


def _grade_script(sandbox: Sandbox, code: str, program: str, timeout_s: float | None) -> GradeResult:
    """Run a program that ends with `_FINISH`; CORRECT when the token comes out."""
    token = secrets.token_hex(16)
    result = sandbox.run(_HEAD + program + _FINISH, stdin=token + "\n", timeout_s=timeout_s)
    if _passed(result, token):
        return GradeResult(Verdict.CORRECT, _shown(code), "all tests passed")
    return GradeResult(Verdict.WRONG, _shown(code), _failure(result))


def humaneval_program(code: str, meta: Mapping[str, Any]) -> str:
    """The program a HumanEval answer is graded with, without the harness's token lines
    (prompt, answer, the ``check`` function, and its call)."""
    _need(meta, "test", "entry_point")
    entry = str(meta["entry_point"])
    program = _program_with_prompt(code, str(meta.get("prompt", "")), entry)
    return program + "\n\n" + str(meta["test"]) + f"\n\ncheck({entry})\n"


def grade_humaneval(
    code: str, meta: Mapping[str, Any], sandbox: Sandbox, timeout_s: float | None = None
) -> GradeResult:
    return _grade_script(sandbox, code, humaneval_program(code, meta), timeout_s)


_UNITTEST_RUNNER = """
import unittest as _crl_unittest, sys as _crl_sys
_crl_suite = _crl_unittest.TestSuite(
    _crl_unittest.defaultTestLoader.loadTestsFromTestCase(_crl_case)
    for _crl_case in list(globals().values())
    if isinstance(_crl_case, type) and issubclass(_crl_case, _crl_unittest.TestCase)
)
_crl_result = _crl_unittest.TextTestRunner(stream=_crl_sys.stderr, verbosity=0).run(_crl_suite)
if not (_crl_result.wasSuccessful() and _crl_result.testsRun > 0):
    raise SystemExit(1)
"""


def grade_unittest(code: str, meta: Mapping[str, Any], sandbox: Sandbox, timeout_s: float | None = None) -> GradeResult:
    _need(meta, "test")
    program = _program_with_prompt(code, str(meta.get("prompt", "")), str(meta.get("entry_point", "task_func")))
    program += "\n\n" + str(meta["test"]) + "\n" + _UNITTEST_RUNNER
    return _grade_script(sandbox, code, program, timeout_s)


def _tests(meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    tests = meta.get("tests")
    if not isinstance(tests, list) or not tests:
        raise ValueError(f"question meta needs a non-empty 'tests' list (have {sorted(meta)})")
    out = []
    for i, t in enumerate(tests):
        if not isinstance(t, Mapping) or not isinstance(t.get("input"), str) or not isinstance(t.get("output"), str):
            raise ValueError(f"test {i} must be {{'input': str, 'output': str}}, got {t!r}"[:300])
        out.append((t["input"], t["output"]))
    return out


def _tokens(text: str) -> list[list[str]]:
    lines = [ln.split() for ln in text.strip().splitlines()]
    return [ln for ln in lines if ln] if any(lines) else []


def _same_token(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6)


def outputs_match(got: str, expected: str) -> bool:
    """Whitespace-insensitive comparison of program output: same lines (blank
    lines ignored) of the same tokens; numbers may differ by 1e-6."""
    a, b = _tokens(got), _tokens(expected)
    return len(a) == len(b) and all(
        len(x) == len(y) and all(_same_token(s, t) for s, t in zip(x, y)) for x, y in zip(a, b)
    )


def grade_stdio(code: str, meta: Mapping[str, Any], sandbox: Sandbox, timeout_s: float | None = None) -> GradeResult:
    tests = _tests(meta)
    per_test = float(meta.get("timeout_s") or timeout_s or sandbox.timeout_s)
    for i, (given, expected) in enumerate(tests):
        result = sandbox.run(code, stdin=given, timeout_s=per_test)
        if not result.ok:
            return GradeResult(Verdict.WRONG, _shown(code), f"test {i + 1}/{len(tests)}: {_failure(result)}")
        if result.output_truncated or not outputs_match(result.stdout, expected):
            return GradeResult(Verdict.WRONG, _shown(code), f"test {i + 1}/{len(tests)}: wrong output")
    return GradeResult(Verdict.CORRECT, _shown(code), f"all {len(tests)} tests passed")


_CALL_RUNNER = """
import json as _crl_json, signal as _crl_signal

def _crl_alarm(*_):
    raise TimeoutError("test timed out")

def _crl_plain(value):
    if isinstance(value, (tuple, list)):
        return [_crl_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _crl_plain(v) for k, v in value.items()}
    return value

def _crl_run(fn_name, tests, per_test):
    target = globals().get("Solution")
    fn = getattr(target(), fn_name) if isinstance(target, type) and hasattr(target, fn_name) else globals()[fn_name]
    results = []
    _crl_signal.signal(_crl_signal.SIGALRM, _crl_alarm)
    for raw in tests:
        args = [_crl_json.loads(line) for line in raw.split("\\n") if line.strip()]
        _crl_signal.setitimer(_crl_signal.ITIMER_REAL, per_test)
        try:
            value = fn(*args)
        finally:
            _crl_signal.setitimer(_crl_signal.ITIMER_REAL, 0)
        results.append(_crl_json.dumps(_crl_plain(value), default=repr))
    return results

_crl_results = _crl_run(%(fn)r, %(tests)r, %(per_test)r)
__import__("sys").stdout.write("\\n" + _crl_json.dumps(_crl_results))
"""


# LeetCode-style answers use `List`, `deque`, `heapq`... without importing them, as the
# judge's own harness provides them; so does this one (the answer's own imports still run).
_CALL_IMPORTS = (
    "from typing import *\n"
    "import bisect, collections, functools, heapq, itertools, math, operator, re, string\n"
    "from collections import Counter, defaultdict, deque, OrderedDict\n"
    "from functools import cache, lru_cache, reduce\n"
    "from itertools import accumulate, combinations, permutations, product\n"
    "from math import ceil, floor, gcd, inf, sqrt\n"
    "from heapq import heapify, heappop, heappush\n"
)


def _values_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k]) for k in a)
    return a == b


def grade_call(code: str, meta: Mapping[str, Any], sandbox: Sandbox, timeout_s: float | None = None) -> GradeResult:
    _need(meta, "fn_name")
    tests = _tests(meta)
    expected = [json.loads(out) for _, out in tests]  # a bad reference raises: ERROR
    per_test = float(meta.get("timeout_s") or timeout_s or sandbox.timeout_s)
    program = _CALL_IMPORTS + code
    starter = str(meta.get("starter_code") or "")
    if starter and "import" in starter:  # only the imports of a starter matter; its stub is replaced
        program = "\n".join(ln for ln in starter.splitlines() if re.match(r"(from \S+ )?import ", ln)) + "\n" + program
    program += _CALL_RUNNER % {"fn": str(meta["fn_name"]), "tests": [t for t, _ in tests], "per_test": per_test}
    token = secrets.token_hex(16)
    result = sandbox.run(_HEAD + program + _FINISH, stdin=token + "\n", timeout_s=per_test * len(tests) + 5)
    if not _passed(result, token):
        return GradeResult(Verdict.WRONG, _shown(code), _failure(result))
    lines = result.stdout.rstrip("\n").split("\n")
    try:
        got = [json.loads(v) for v in json.loads(lines[-2])]
    except (ValueError, IndexError):
        return GradeResult(Verdict.WRONG, _shown(code), "unreadable results (the program wrote over them)")
    for i, (g, e) in enumerate(zip(got, expected)):
        if not _values_equal(g, e):
            return GradeResult(
                Verdict.WRONG, _shown(code), f"test {i + 1}/{len(tests)}: returned {json.dumps(g)[:200]}"
            )
    return GradeResult(Verdict.CORRECT, _shown(code), f"all {len(tests)} tests passed")


_GRADERS = {
    "code_humaneval": grade_humaneval,
    "code_stdio": grade_stdio,
    "code_call": grade_call,
    "code_unittest": grade_unittest,
}

_default_sandbox: Sandbox | None = None


def default_sandbox() -> Sandbox:
    """A process-wide Sandbox with the default limits, made on first use."""
    global _default_sandbox
    if _default_sandbox is None:
        _default_sandbox = Sandbox()
    return _default_sandbox


def grade_code(
    kind: str,
    response: str,
    meta: Mapping[str, Any] | None,
    *,
    sandbox: Sandbox | None = None,
    timeout_s: float | None = None,
) -> GradeResult:
    """Grade a code answer of `kind` (one of `CODE_KINDS`) against the tests in `meta`.

    `timeout_s` bounds one run (per test for ``code_stdio``/``code_call``;
    default: the sandbox's). Never raises for a bad response; a sandbox failure
    or bad `meta` is ``ERROR``.
    """
    if kind not in _GRADERS:
        raise ValueError(f"unknown code grader kind {kind!r}; allowed: {', '.join(CODE_KINDS)}")
    if meta is None:
        return GradeResult(Verdict.ERROR, None, f"{kind} needs the question's meta (its tests); none was given")
    code = extract_code(response)
    if code is None:
        return GradeResult(Verdict.WRONG, None, "no code found in the answer")
    try:
        return _GRADERS[kind](code, meta, sandbox or default_sandbox(), timeout_s)
    except SandboxError as exc:
        return GradeResult(Verdict.ERROR, _shown(code), f"sandbox failed: {exc}")
    except (ValueError, TypeError, KeyError) as exc:
        return GradeResult(Verdict.ERROR, _shown(code), f"bad test data for {kind}: {exc}")
