"""LiveCodeBench: competitive-programming problems in the rows of its
``code_generation_lite`` release (``livecodebench/code_generation_lite`` on the Hub;
files ``test.jsonl`` for release_v1, then ``test2.jsonl`` ... ``test6.jsonl`` for
the problems each later release added).

A row has ``question_title``, ``question_content``, ``platform``, ``question_id``,
``contest_id``, ``contest_date``, ``starter_code``, ``difficulty``,
``public_test_cases`` (a JSON list of ``{input, output, testtype}``, testtype
``"stdin"`` or ``"functional"``), ``private_test_cases`` (the same JSON, or
upstream base64(zlib(pickle(that JSON string)))) and ``metadata`` (JSON; a
functional problem's has ``func_name``). stdin problems become ``code_stdio``
questions, functional ones ``code_call`` (see `conductor_rl.grading.code`); both
carry all public and private tests in ``meta["tests"]``.

The pickled test cases are never unpickled: their opcodes are read with
`pickletools.genops`, and only a pickle that holds a single string is accepted
(anything that could import or call, such as GLOBAL or REDUCE, is refused).

Release windows, by ``contest_date`` (inclusive):

* ``"v1"``: 2023-05-01..2024-03-31, release_v1's 400 problems (the paper trains on
  LiveCodeBench v1); read from ``test.jsonl``.
* ``"v6"``: 2025-02-01..2025-05-31, the window that 2025 reports call
  "LiveCodeBench v6" (the paper evaluates on "v6" without dating it; we take this
  common reading). Release_v6 ends in April 2025, so this is its problems from
  February on; read from ``test6.jsonl``, the file release_v6 added.
* ``"YYYY-MM-DD..YYYY-MM-DD"``: any window; read from every file present.

LiveCodeBench has no reference solutions: a question's ``reference`` is a
comment saying so, and its tests grade an answer.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import pickletools
import zlib
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .files import (
    DataFormatError,
    check_limit,
    collect_questions,
    iter_rows,
    resolve_benchmark_file,
    str_field,
)
from .question import Question

HUB_NAME = "livecodebench/code_generation_lite"
#: Named release windows: (first, last) contest date, inclusive.
LCB_WINDOWS = MappingProxyType(
    {
        "v1": (date(2023, 5, 1), date(2024, 3, 31)),
        "v6": (date(2025, 2, 1), date(2025, 5, 31)),
    }
)
_WINDOW_FILES = MappingProxyType({"v1": ("test",), "v6": ("test6",)})
_ALL_FILES = ("test", "test2", "test3", "test4", "test5", "test6")
_TEST_TYPES = {"stdin": "code_stdio", "functional": "code_call"}
NO_REFERENCE = "# LiveCodeBench ships no reference solution; the tests in meta['tests'] grade an answer.\n"
#: Decoded private test cases larger than this are refused (a zlib bomb guard).
MAX_PRIVATE_TESTS_BYTES = 1 << 30

# Opcodes of a pickle that holds one string, and nothing that can import or call.
_STRING_OPCODES = frozenset({"UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"})
_FRAMING_OPCODES = frozenset({"PROTO", "FRAME", "STOP", "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"})


def lcb_window(window: str) -> tuple[date, date]:
    """(first, last) contest date of a window: ``"v1"``, ``"v6"`` or ``"YYYY-MM-DD..YYYY-MM-DD"``."""
    if window in LCB_WINDOWS:
        return LCB_WINDOWS[window]
    first, sep, last = str(window).partition("..")
    start: date | None
    end: date | None
    try:
        start, end = date.fromisoformat(first.strip()), date.fromisoformat(last.strip())
    except ValueError:
        start = end = None
    if not sep or start is None or end is None:
        raise ValueError(
            f"LiveCodeBench window must be one of {list(LCB_WINDOWS)} or 'YYYY-MM-DD..YYYY-MM-DD', got {window!r}"
        )
    if start > end:
        raise ValueError(f"LiveCodeBench window {window!r} starts after it ends")
    return start, end


def pickled_string(data: bytes) -> str:
    """The string a pickle holds, read from its opcodes without unpickling it.

    Raises ValueError for a pickle holding anything but one string: its other
    opcodes could import and call code.
    """
    strings: list[str] = []
    refused = None
    try:
        for opcode, arg, _pos in pickletools.genops(data):
            if opcode.name in _STRING_OPCODES:
                strings.append(str(arg))  # these opcodes' argument is the str itself
            elif opcode.name not in _FRAMING_OPCODES:
                refused = opcode.name
                break
    except ValueError as exc:
        raise ValueError(f"private test cases are not a valid pickle: {exc}") from None
    if refused is not None:
        raise ValueError(
            f"private test cases are a pickle that holds more than a string (opcode {refused}); "
            "refusing to unpickle untrusted data"
        )
    if len(strings) != 1:
        raise ValueError(
            f"private test cases are a pickle of {len(strings)} strings, not one; refusing to unpickle untrusted data"
        )
    return strings[0]


def unpack_private_tests(value: str) -> str:
    """The JSON text inside upstream's packed ``private_test_cases``:
    base64(zlib(pickle(string))), unpacked without unpickling."""
    try:
        packed = base64.b64decode(value.encode("ascii"), validate=True)
        inflater = zlib.decompressobj()
        data = inflater.decompress(packed, MAX_PRIVATE_TESTS_BYTES)
    except (binascii.Error, UnicodeEncodeError, zlib.error) as exc:
        raise ValueError(f"private_test_cases is neither JSON nor base64(zlib(pickle)) ({exc})") from None
    if inflater.unconsumed_tail:
        raise ValueError(f"private test cases decompress to more than {MAX_PRIVATE_TESTS_BYTES} bytes")
    return pickled_string(data)


def _test_cases(row: Mapping[str, Any], key: str) -> list[dict[str, str]]:
    value = row[key]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            if key != "private_test_cases":
                raise ValueError(f"field {key!r} is not valid JSON: {exc.msg}") from None
            try:
                value = json.loads(unpack_private_tests(value))
            except json.JSONDecodeError as inner:
                raise ValueError(f"the unpacked private test cases are not valid JSON: {inner.msg}") from None
    if not isinstance(value, list):
        raise ValueError(f"field {key!r} must be a list of test cases, got {type(value).__name__}")
    cases = []
    for i, case in enumerate(value):
        if not isinstance(case, Mapping) or not all(isinstance(case.get(k), str) for k in ("input", "output")):
            raise ValueError(f"{key}[{i}] must be an object with string 'input' and 'output'")
        if case.get("testtype") not in _TEST_TYPES:
            raise ValueError(f"{key}[{i}] has testtype {case.get('testtype')!r}; allowed: {list(_TEST_TYPES)}")
        cases.append({"input": case["input"], "output": case["output"], "testtype": case["testtype"]})
    return cases


def _contest_date(value: Any) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value)[:10])
    except ValueError:
        raise ValueError(f"contest_date must be an ISO date such as '2023-08-21T00:00:00', got {value!r}") from None


def _metadata(value: Any) -> dict:
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    if not isinstance(value, dict):
        raise ValueError(f"field 'metadata' must be a JSON object, got {type(value).__name__}")
    return value


def _statement(content: str, kind: str, fn_name: str | None, starter: str) -> str:
    text = content.strip()
    if kind == "code_stdio":
        return text + (
            "\n\nWrite a complete Python 3 program that reads the input from standard input and writes "
            "the answer to standard output. Give the program in one ```python code block."
        )
    if starter.strip():
        return text + (
            f"\n\nComplete this starter code in Python; each test calls `Solution().{fn_name}(...)`:\n\n"
            f"```python\n{starter.rstrip()}\n```\n\nGive the whole class, with the imports it uses (such as "
            "`from typing import List`), in one ```python code block."
        )
    return text + f"\n\nWrite a Python function `{fn_name}`; each test calls it. Give it in one ```python code block."


def lcb_question(row: Mapping[str, Any], window: tuple[date, date] | None = None) -> Question | None:
    """A LiveCodeBench row as a Question; None when its contest date is outside `window`."""
    released = _contest_date(row["contest_date"])
    if window is not None and not window[0] <= released <= window[1]:
        return None
    question_id = str_field(row, "question_id")
    content = str_field(row, "question_content")
    tests = _test_cases(row, "public_test_cases")
    n_public = len(tests)
    tests += _test_cases(row, "private_test_cases")
    types = sorted({t["testtype"] for t in tests})
    if len(types) != 1:
        raise ValueError(f"a problem's tests must all be 'stdin' or all 'functional', got {types or 'none'}")
    kind = _TEST_TYPES[types[0]]
    starter = row.get("starter_code") or ""
    if not isinstance(starter, str):
        raise ValueError(f"field 'starter_code' must be a string, got {type(starter).__name__}")
    meta: dict[str, Any] = {
        "question_id": question_id,
        "title": row.get("question_title"),
        "platform": row.get("platform"),
        "contest_id": row.get("contest_id"),
        "contest_date": released.isoformat(),
        "difficulty": row.get("difficulty"),
        "n_public_tests": n_public,
        "tests": [{"input": t["input"], "output": t["output"]} for t in tests],
    }
    fn_name = None
    if kind == "code_call":
        fn_name = _metadata(row.get("metadata")).get("func_name")
        if not isinstance(fn_name, str) or not fn_name.strip():
            raise ValueError("a functional problem needs metadata.func_name (the function its tests call)")
        meta.update(fn_name=fn_name, starter_code=starter)
    return Question(
        id=f"livecodebench/{question_id}",
        domain="code",
        question=_statement(content, kind, fn_name, starter),
        reference=NO_REFERENCE,
        answer_kind=kind,
        source="livecodebench",
        meta=meta,
    )


def _candidates(stem: str) -> tuple[str, ...]:
    return tuple(f"livecodebench/{stem}{suffix}" for suffix in (".jsonl", ".jsonl.gz", ".parquet"))


def _files(window: str, path: str | os.PathLike | None) -> list[Path]:
    if window in _WINDOW_FILES:
        return [resolve_benchmark_file("livecodebench", _candidates(s), path, HUB_NAME) for s in _WINDOW_FILES[window]]
    files = []
    for stem in _ALL_FILES:
        try:
            file = resolve_benchmark_file("livecodebench", _candidates(stem), path, HUB_NAME)
        except FileNotFoundError:
            continue
        if file not in files:
            files.append(file)
    if not files:  # raises, naming every file it looked for
        resolve_benchmark_file("livecodebench", [c for s in _ALL_FILES for c in _candidates(s)], path, HUB_NAME)
    return files


def load_livecodebench(
    window: str = "v1", path: str | os.PathLike | None = None, limit: int | None = None
) -> list[Question]:
    """LiveCodeBench problems whose contest date lies in `window` (see the module docstring).

    `path`: an upstream file (JSONL or Parquet) or a directory holding them; default:
    ``livecodebench/`` in the shared data directory. Ids ``livecodebench/<question_id>``.
    """
    limit = check_limit(limit)
    span = lcb_window(window)
    out: list[Question] = []
    seen: set[str] = set()
    for file in _files(window, path):
        remaining = None if limit is None else limit - len(out)
        for q in collect_questions(file, iter_rows(file), lambda row, _i: lcb_question(row, span), remaining):
            if q.id in seen:
                raise DataFormatError(file, None, f"duplicate id {q.id!r} (also in an earlier file)")
            seen.add(q.id)
            out.append(q)
    return out
