"""Reading answers out of worker responses, and the string-level graders.

Three graders live here: multiple choice (`grade_choice`), normalised exact match
(`grade_exact`) and GSM8K-style numbers (`grade_numeric`). Mathematical
equivalence is in `conductor_rl.grading.math`.

All of them share a few rules:

* A reasoning trace is not an answer: when the response holds ``</think>``,
  only the text after the last ``</think>`` is graded.
* A response with no readable answer (empty, garbage, no letter, no number) is
  ``WRONG`` with ``extracted=None``: that is the policy's fault.
* A bad *reference* (not a letter, no number, ...) is a data or caller error: the
  functions here raise ``ValueError``, and `conductor_rl.grading.grade` turns
  that into an ``ERROR`` verdict, which is not scored.
"""

from __future__ import annotations

import math as _math
import re
import unicodedata
from fractions import Fraction

from conductor_rl.data.boxed import all_boxed, last_boxed
from conductor_rl.grading.verdict import GradeResult, Verdict

__all__ = [
    "extract_choice",
    "extract_exact",
    "extract_number",
    "grade_choice",
    "grade_exact",
    "grade_numeric",
    "normalize_text",
    "strip_reasoning",
]

# ---------------------------------------------------------------------------
# shared helpers


def strip_reasoning(text: str) -> str:
    """The part of `text` after the last ``</think>`` (all of it if there is none)."""
    cut = text.rfind("</think>")
    return text if cut < 0 else text[cut + len("</think>") :]


_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")


def _unwrap_text_commands(s: str) -> str:
    """``\\text{(B)}`` -> ``(B)``, applied until nothing changes (handles nesting)."""
    for _ in range(10):
        new = _TEXT_CMD.sub(r"\1", s)
        if new == s:
            break
        s = new
    return s


def _prepare(response: str) -> str:
    text = strip_reasoning(response)
    text = unicodedata.normalize("NFKC", text)
    return text.replace("\u2212", "-")  # unicode minus


# ---------------------------------------------------------------------------
# multiple choice

# "answer is (B)", "Answer: C", "**Answer:** c)", "the correct option is B",
# "final answer: option D", "The answer would be [A]".
_CHOICE_STATEMENT = re.compile(
    r"\b(?:(?:final|correct|right|best)\s+)?(?:answer|option|choice)s?\b"
    r"[\s*_]*(?:(?:is|would\s+be|should\s+be|must\s+be|will\s+be|was)\b)?[\s*_:=\-]*"
    r"(?:(?:option|choice|letter)\s+)?"
    r"(?P<open>[(\[]?)[\s*_]*(?P<letter>[A-Za-z])[\s*_]*(?P<close>[)\]]?)"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_QUALIFIED_OPTION = re.compile(r"\b(?:final|correct|right|best)\s+(?:option|choice)s?\b", re.IGNORECASE)
_BARE_LETTER = re.compile(r"^[\s*_`\"'(\[]*(?P<letter>[A-Za-z])[\s*_`\"')\].:]*$")
_LINE_LABEL = re.compile(r"^[\s*_]*(?:\((?P<a>[A-Z])\)|(?P<b>[A-Z])[).:])[*_]*(?:\s|$)")


def _statement_letter(m: re.Match[str]) -> str | None:
    letter = m.group("letter")
    bracketed = bool(m.group("open") and m.group("close"))
    rest = m.string[m.end() :]
    if letter == "I" and not bracketed and re.match(r"'|\s+[a-z]", rest):
        return None  # "Answer: I think ...", "The answer, I'm sure, ..."
    if letter.isupper() or bracketed:
        return letter
    # A lower-case letter without brackets must end the statement ("the answer is b."),
    # so that "the answer is a prime" is not read as "A".
    if not rest.strip() or rest.lstrip(" *_")[:1] in set(".,;:!?)\n"):
        return letter
    return None


def extract_choice(response: str) -> str | None:
    """The answer letter a response commits to (upper case), or None.

    Precedence (the first rule that finds a letter decides):

    1. explicit answer statements, *the last one in the text wins*:
       ``\\boxed{B}`` / ``\\boxed{\\text{(B)}}``, "the answer is (B)", "Answer: C",
       "**Answer:** C", "the correct option is D", "final answer: option A";
    2. a response that is only a letter: "B", "(b)", "**C**", "D.";
    3. the last non-empty line is only a letter;
    4. line labels such as "(B) 42" or "C. Paris", when exactly one letter is used
       as a label in the whole response (an enumeration of options is not an answer).

    The letter is returned even when it is outside the question's range; the
    grader decides that it is wrong.
    """
    text = _unwrap_text_commands(_prepare(response)).replace("$", "")
    # 1. explicit statements, boxed or written out; the last one wins.
    candidates: list[tuple[int, str]] = []
    for pos, content in all_boxed(text):
        m = None if content is None else _BARE_LETTER.match(content)  # None only for unclosed boxes, not listed here
        if m:
            candidates.append((pos, m.group("letter")))
    for m in _CHOICE_STATEMENT.finditer(text):
        word = m.group(0)
        # "option B" alone is often a list item ("Option B: ..."): only "correct
        # option", "best choice", ... or "answer ... option B" state an answer.
        if re.match(r"(?i)(option|choice)", word) and not _QUALIFIED_OPTION.match(word):
            continue
        letter = _statement_letter(m)
        if letter:
            candidates.append((m.start(), letter))
    if candidates:
        return max(candidates, key=lambda pc: pc[0])[1].upper()
    # 2. the whole response is a letter.
    m = _BARE_LETTER.match(text)
    if m:
        return m.group("letter").upper()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    # 3. the last line is a letter.
    m = _BARE_LETTER.match(lines[-1])
    if m:
        return m.group("letter").upper()
    # 4. one distinct line label.
    labels = set()
    for ln in lines:
        m = _LINE_LABEL.match(ln)
        if m:
            labels.add(m.group("a") or m.group("b"))
    if len(labels) == 1:
        return labels.pop()
    return None


def _reference_letter(reference: str, n_choices: int) -> str:
    if not 1 <= n_choices <= 26:
        raise ValueError(f"n_choices must be between 1 and 26, got {n_choices}")
    m = _BARE_LETTER.match(_unwrap_text_commands(str(reference)).replace("$", ""))
    if not m:
        raise ValueError(f"choice reference must be a letter, got {reference!r}")
    letter = m.group("letter").upper()
    if ord(letter) - ord("A") >= n_choices:
        raise ValueError(f"choice reference {letter} is outside A-{chr(ord('A') + n_choices - 1)}")
    return letter


def grade_choice(response: str, reference: str, n_choices: int = 4) -> GradeResult:
    """Grade a multiple-choice response against a reference letter.

    Letters are A, B, ... (``n_choices`` of them), case-insensitive; the
    reference may be written "B", "(b)" or ``\\text{(B)}``. See `extract_choice`
    for how the response's letter is found (the last explicit answer statement
    wins). A letter outside the range is ``WRONG`` (``extracted`` is that letter).

    Raises:
        ValueError: the reference is not a letter in range, or ``n_choices`` is
            not in 1..26 (a data error, not the response's fault).
    """
    ref = _reference_letter(reference, n_choices)
    if not response or not response.strip():
        return GradeResult(Verdict.WRONG, None, "empty response")
    letter = extract_choice(response)
    if letter is None:
        return GradeResult(Verdict.WRONG, None, "no answer letter found")
    last = chr(ord("A") + n_choices - 1)
    if ord(letter) - ord("A") >= n_choices:
        return GradeResult(Verdict.WRONG, letter, f"answer {letter} is not one of A-{last}")
    if letter == ref:
        return GradeResult(Verdict.CORRECT, letter, "letter matches")
    return GradeResult(Verdict.WRONG, letter, f"answered {letter}, reference {ref}")


# ---------------------------------------------------------------------------
# exact match

_ANSWER_LINE = re.compile(
    r"\b(?:final\s+answer|answer)\b[\s*_]*"
    r"(?:is\b|would\s+be\b|should\s+be\b|will\s+be\b|:|=)[\s*_:]*(?P<rest>[^\n]*)",
    re.IGNORECASE,
)
_EDGE_PUNCT = " \t\r\n.,;:!?\"'`*_()[]{}<>«»“”‘’"


def normalize_text(s: str) -> str:
    """Normalise an answer string for exact comparison.

    NFKC, ``\\text{}``-like wrappers and ``$`` removed, lower case, whitespace
    collapsed, punctuation, quotes, brackets and markdown stripped at both ends
    (not inside: "3.5" and "New York, NY" keep theirs), a leading "the answer is"
    dropped.
    """
    s = unicodedata.normalize("NFKC", s)
    box = last_boxed(s)
    if box is not None:
        s = box
    s = _unwrap_text_commands(s).replace("$", "")
    s = " ".join(s.lower().split())
    for _ in range(3):
        s = s.strip(_EDGE_PUNCT)
        m = re.match(r"(?:the\s+)?(?:final\s+)?answer\s*(?:is\b|:)\s*", s)
        if not m:
            break
        s = s[m.end() :]
    return s.strip(_EDGE_PUNCT)


def extract_exact(response: str) -> str | None:
    """The answer text of a free-form response, or None if it is empty.

    Precedence: the last ``\\boxed{...}``; else the rest of the line after the
    last "answer is" / "Answer:"; else the response itself if it is one line;
    else its last non-empty line.
    """
    text = _prepare(response)
    box = last_boxed(text)
    if box is not None:
        return box.strip() or None
    statements = [m.group("rest").strip() for m in _ANSWER_LINE.finditer(text)]
    statements = [s for s in statements if s.strip(_EDGE_PUNCT)]
    if statements:
        return statements[-1]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    return lines[-1]


def grade_exact(response: str, reference: str) -> GradeResult:
    """Normalised exact match (see `normalize_text` and `extract_exact`).

    Case, surrounding whitespace, punctuation at the ends, ``\\boxed{}``,
    ``\\text{}`` and a leading "The answer is" do not matter.

    Raises:
        ValueError: the reference normalises to an empty string.
    """
    ref = normalize_text(str(reference))
    if not ref:
        raise ValueError(f"exact reference is empty after normalisation: {reference!r}")
    if not response or not response.strip():
        return GradeResult(Verdict.WRONG, None, "empty response")
    answer = extract_exact(response)
    got = normalize_text(answer) if answer is not None else ""
    if not got:
        return GradeResult(Verdict.WRONG, None, "no answer found")
    if got == ref:
        return GradeResult(Verdict.CORRECT, answer, "normalised strings match")
    return GradeResult(Verdict.WRONG, answer, f"normalised answer {got[:80]!r} != {ref[:80]!r}")


# ---------------------------------------------------------------------------
# numbers

# A number: optional sign and "$", digits with optional thousands commas and
# decimals, an optional "/denominator"; not part of a word or of a larger number.
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>-?)[ \t]*\\?\$?[ \t]*"
    r"(?P<int>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:/(?P<den>\d+(?:\.\d+)?))?"
    r"(?![\d])(?!,\d{3})"
)
_FRAC = re.compile(r"(?P<sign>-?)\s*\\[dt]?frac\s*\{\s*(?P<n>-?[\d.,]+)\s*\}\s*\{\s*(?P<d>[\d.,]+)\s*\}")
_HASH_MARK = re.compile(r"####[ \t]*(?P<rest>[^\n]*)")
# After "answer is", at most this many characters may come before the number
# ("The answer is approximately $1,234"); further away, the number is not the answer.
_MAX_LEAD = 32


def _to_number(sign: str, integer: str, den: str | None) -> Fraction | None:
    try:
        value = Fraction(integer.replace(",", ""))
        if den is not None:
            d = Fraction(den)
            if d == 0:
                return None
            value /= d
    except (ValueError, ZeroDivisionError):
        return None
    return -value if sign == "-" else value


def _first_number(s: str, max_lead: int | None = None) -> tuple[str, Fraction] | None:
    f = _FRAC.search(s)
    m = _NUMBER.search(s)
    if f is not None and (m is None or f.start() <= m.start()):
        if max_lead is None or f.start() <= max_lead:
            negative = (f.group("sign") == "-") != f.group("n").startswith("-")
            v = _to_number("-" if negative else "", f.group("n").lstrip("-"), f.group("d"))
            if v is not None:
                return f.group().strip(), v
    if m is None or (max_lead is not None and m.start() > max_lead):
        return None
    v = _to_number(m.group("sign"), m.group("int"), m.group("den"))
    return (m.group().strip(), v) if v is not None else None


def extract_number(response: str) -> tuple[str, Fraction] | None:
    """The numeric answer of a response as (text as written, exact value), or None.

    Precedence: explicit markers first, the last one in the text winning:
    ``#### 42`` (GSM8K), ``\\boxed{42}``, "the answer is 42" / "Answer: $42";
    without any marker, the last number in the text.

    Numbers: ``1,234`` (thousands commas), ``$5``, ``-3``, ``.5``, ``18.00``,
    ``3/4`` and ``\\frac{3}{4}`` are read; a ``%`` sign is ignored, so "25%"
    is 25 (GSM8K-style references are bare numbers), never 0.25. A hyphen
    between two numbers ("pages 5-10") is not a minus sign.
    """
    text = _prepare(response)
    marked: list[tuple[int, tuple[str, Fraction]]] = []
    for m in _HASH_MARK.finditer(text):
        got = _first_number(m.group("rest"))
        if got:
            marked.append((m.start(), got))
    for pos, content in all_boxed(text):
        got = None if content is None else _first_number(_unwrap_text_commands(content))
        if got:
            marked.append((pos, got))
    for m in _ANSWER_LINE.finditer(text):
        got = _first_number(m.group("rest"), max_lead=_MAX_LEAD)
        if got:
            marked.append((m.start(), got))
    if marked:
        return max(marked, key=lambda pg: pg[0])[1]
    last = None
    for m in _NUMBER.finditer(text):
        last = m
    last_frac = None
    for f in _FRAC.finditer(text):
        last_frac = f
    if last_frac is not None and (last is None or last_frac.end() >= last.end()):
        return _first_number(last_frac.group())  # "\\frac{3}{4}" is one number, not "4"
    if last is None:
        return None
    v = _to_number(last.group("sign"), last.group("int"), last.group("den"))
    return (last.group().strip(), v) if v is not None else None


def grade_numeric(response: str, reference: str | float, rel_tol: float = 1e-6) -> GradeResult:
    """GSM8K-style numeric grading.

    The response's number is found by `extract_number` (``####``, ``\\boxed``,
    "answer is" markers, else the last number). The reference may be a number,
    a numeric string ("1,234", "$18", "0.5") or a whole GSM8K solution ending in
    ``#### 18``. Values match when they agree within ``rel_tol`` (relative), so
    "5.0" == "5" and "18.00" == "$18". When both values are integers they must
    be equal exactly (1000000 is not 999999, whatever ``rel_tol``). Percent signs
    are ignored on both sides.

    Raises:
        ValueError: the reference holds no number.
    """
    if isinstance(reference, bool):
        raise ValueError(f"numeric reference must be a number, got {reference!r}")
    if isinstance(reference, int):
        ref = Fraction(reference)
    elif isinstance(reference, float):
        if not _math.isfinite(reference):
            raise ValueError(f"numeric reference is not finite: {reference!r}")
        ref = Fraction(reference)
    else:
        got_ref = extract_number(str(reference))
        if got_ref is None:
            raise ValueError(f"numeric reference holds no number: {reference!r}")
        ref = got_ref[1]
    if not response or not response.strip():
        return GradeResult(Verdict.WRONG, None, "empty response")
    got = extract_number(response)
    if got is None:
        return GradeResult(Verdict.WRONG, None, "no number found")
    text, value = got
    if value.denominator == 1 and ref.denominator == 1:
        same = value == ref
    else:
        same = _math.isclose(float(value), float(ref), rel_tol=rel_tol, abs_tol=1e-12)
    shown_value, shown_ref = _show(value), _show(ref)
    if same:
        return GradeResult(Verdict.CORRECT, text, f"{shown_value} == {shown_ref}")
    return GradeResult(Verdict.WRONG, text, f"{shown_value} != {shown_ref}")


def _show(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):.10g}"
