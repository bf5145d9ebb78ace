"""Tests of conductor_rl.grading: verdicts and reward, answer extraction, and the
math-verify grader with its real child process (timeouts, kills, threads)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor_rl.grading import (
    REWARD_CORRECT,
    REWARD_FORMAT,
    REWARD_WRONG,
    GradeResult,
    MathGrader,
    Verdict,
    extract_choice,
    extract_number,
    grade,
    grade_choice,
    grade_exact,
    grade_numeric,
    last_boxed,
    reward,
)
from conductor_rl.grading.math import MAX_BOXED_CHARS, TEST_HANG_ENV

pytestmark = pytest.mark.light  # starts no Ray, vLLM or learner: runs beside the heavy tests (conftest.py)

ROOT = Path(__file__).resolve().parents[1]
MATH500 = ROOT.parent / "shared" / "data" / "math500" / "test.jsonl"

C, W, E = Verdict.CORRECT, Verdict.WRONG, Verdict.ERROR
HANG_GUARD_S = 30.0  # a bound on a wait that only a hang reaches, never a slow machine


def _alive(pid: int) -> bool:
    """True if `pid` runs and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


@pytest.fixture(scope="module")
def mg():
    with MathGrader(timeout_s=10.0) as grader:
        grader.warm_up()
        yield grader


# ---------------------------------------------------------------------------
# verdicts and reward


def test_reward_table():
    assert (REWARD_CORRECT, REWARD_WRONG, REWARD_FORMAT) == (1.0, 0.5, 0.0)
    assert reward(True, Verdict.CORRECT) == 1.0
    assert reward(True, Verdict.WRONG) == 0.5
    assert reward(True, Verdict.ERROR) is None  # infrastructure: retried or dropped, never 0.5
    assert reward(True, None) is None  # a parsed plan whose workflow never produced a verdict
    for v in (Verdict.CORRECT, Verdict.WRONG, Verdict.ERROR, None):
        assert reward(False, v) == 0.0
    assert reward(True, "correct") == 1.0 and reward(True, "error") is None


def test_verdict_and_result_shape():
    assert Verdict("wrong") is Verdict.WRONG and str(Verdict.CORRECT) == "correct"
    r = GradeResult(Verdict.WRONG, None)
    assert r.detail == "" and r.ok and not GradeResult(E, None, "x").ok
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.verdict = Verdict.CORRECT  # frozen


# ---------------------------------------------------------------------------
# multiple choice


@pytest.mark.parametrize(
    "response, expected",
    [
        ("The answer is (B)", "B"),
        ("B", "B"),
        ("**Answer: C**", "C"),
        ("**Answer:** D", "D"),
        ("the answer is b.", "B"),
        ("(c)", "C"),
        ("Final answer: $\\boxed{\\text{(D)}}$", "D"),
        ("The correct option is A because the others fail.", "A"),
        ("The answer is option C.", "C"),
        ("(B) 42 is the value we want.", "B"),
        ("Reasoning...\nC", "C"),
        # several letters: the last explicit answer statement wins
        ("The answer is (B). Wait, re-checking: the answer is (C).", "C"),
        ("Answer: A\n...on reflection \\boxed{D}", "D"),
        ("\\boxed{A} hmm, no. Final answer: B", "B"),
        # a reasoning trace is not the answer
        ("<think>the answer is A</think>The answer is B", "B"),
    ],
)
def test_choice_reads_letter(response, expected):
    assert extract_choice(response) == expected
    assert grade_choice(response, expected) == GradeResult(C, expected, "letter matches")
    other = "A" if expected != "A" else "B"
    res = grade_choice(response, other)
    assert res.verdict is W and res.extracted == expected


@pytest.mark.parametrize(
    "response",
    [
        "",
        "   \n ",
        "I am not sure.",
        "the answer is a prime number",  # lower-case "a" is an article here, not a letter
        "Answer: I think it is hard to say.",  # the pronoun I is not a letter
        "Option A is wrong and option B is wrong too",  # mentioning options is not answering
        "A. Paris\nB. London\nC. Rome",  # an enumeration of the options
        "<think>the answer is B</think>",  # nothing after the reasoning
    ],
)
def test_choice_without_answer_is_wrong(response):
    res = grade_choice(response, "B")
    assert res.verdict is W and res.extracted is None and res.detail


def test_choice_out_of_range_and_references():
    res = grade_choice("The answer is (E)", "A")
    assert res.verdict is W and res.extracted == "E" and "A-D" in res.detail
    assert grade_choice("The answer is (E)", "E", n_choices=5).verdict is C
    assert grade_choice("answer: j", "J", n_choices=10).verdict is C
    assert grade_choice("B", "(b)").verdict is C
    assert grade_choice("\\boxed{C}", "\\text{(C)}").verdict is C
    with pytest.raises(ValueError):
        grade_choice("A", "E")  # reference outside A-D: data error
    with pytest.raises(ValueError):
        grade_choice("A", "42")
    # through grade(): a data error is ERROR, never WRONG
    assert grade("choice", "A", "E").verdict is E
    assert grade("choice", "The answer is (E)", "A").verdict is W


# ---------------------------------------------------------------------------
# exact


@pytest.mark.parametrize(
    "response, reference",
    [
        ("Paris", "paris"),
        ("  PARIS.  ", "Paris"),
        ("The answer is Paris.", "Paris"),
        ("Some reasoning.\n**Answer:** New   York", "new york"),
        ("$\\boxed{\\text{Evelyn}}$", "Evelyn"),
        ('"east"', "\\text{east}"),
        ("Thinking...\nthe capital is...\nParis!", "Paris"),
    ],
)
def test_exact_correct(response, reference):
    res = grade_exact(response, reference)
    assert res.verdict is C, res


@pytest.mark.parametrize(
    "response, expected_extracted",
    [("London", "London"), ("The answer is Pariss", "Pariss"), ("", None), ("  ", None), ("...", None)],
)
def test_exact_wrong(response, expected_extracted):
    res = grade_exact(response, "Paris")
    assert res.verdict is W and res.detail
    assert res.extracted == expected_extracted


def test_exact_keeps_inner_punctuation():
    assert grade_exact("3.5", "35").verdict is W
    assert grade_exact("New York, NY", "new york ny").verdict is W
    assert grade("exact", "x", "   ").verdict is E  # empty reference: data error


# ---------------------------------------------------------------------------
# numeric


@pytest.mark.parametrize(
    "response, reference, extracted",
    [
        ("She sells 9 eggs at $2 each.\n#### 1,234", "1234", "1,234"),
        ("#### 18", "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs.\n#### 18", "18"),
        ("She makes $18 every day.", "18", "$18"),
        ("The total is 18.00", "$18", "18.00"),
        ("5.0", "5", "5.0"),
        ("The temperature falls to -7 degrees.", "-7", "-7"),
        ("-$5 net", -5, "-$5"),
        ("First 3, then 4, so finally 12", "12", "12"),  # last number wins
        ("The answer is 18. Check: 18 * 2 = 36.", "18", "18"),  # an answer statement beats later numbers
        ("Answer: approximately $1,500.", 1500.0, "$1,500"),
        ("So $\\boxed{42}$ apples, i.e. 6 bags of 7", "42", "42"),
        ("\\boxed{\\frac{3}{4}}", "0.75", "\\frac{3}{4}"),
        ("half: 1/2", "0.5", "1/2"),
        ("The discount is 25%.", "25", "25"),  # % is ignored: 25% == 25, not 0.25
        ("It runs pages 5-10", "10", "10"),  # a hyphen between numbers is no minus
        ("1,000,000 people", "1000000", "1,000,000"),
        ("<think>maybe 7</think>It is 8.", "8", "8"),
    ],
)
def test_numeric_correct(response, reference, extracted):
    res = grade_numeric(response, reference)
    assert res.verdict is C, res
    assert res.extracted == extracted


def test_numeric_wrong_and_errors():
    res = grade_numeric("no number here", "7")
    assert res.verdict is W and res.extracted is None and res.detail == "no number found"
    assert grade_numeric("", "7").extracted is None
    res = grade_numeric("I get 17", "18")
    assert res.verdict is W and res.extracted == "17"
    assert grade_numeric("-18", "18").verdict is W
    assert grade_numeric("18.0000001", "18").verdict is C  # within rel_tol 1e-6
    assert grade_numeric("18.01", "18").verdict is W
    assert grade_numeric("0", "0").verdict is C
    assert grade_numeric("0.25", "25%").verdict is W  # documented: percent signs are ignored
    with pytest.raises(ValueError):
        grade_numeric("5", "no number")
    assert grade("numeric", "5", "no number").verdict is E
    assert extract_number("x = \\frac{-3}{4}")[1] == Fraction(-3, 4)
    assert extract_number("−12 (unicode minus)")[1] == -12


@given(st.integers(min_value=-(10**12), max_value=10**12))
@settings(max_examples=200, deadline=None)
def test_numeric_formats_roundtrip(n):
    for text in (f"{n:,}", f"The answer is {n}.", f"#### {n:,}", f"\\boxed{{{n}}}"):
        assert grade_numeric(text, str(n)).verdict is C, text
    assert grade_numeric(f"so it is {n + 1}", n).verdict is W


# ---------------------------------------------------------------------------
# extraction helpers and robustness


def test_last_boxed():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{\\{1, 2\\}}") == "\\{1, 2\\}"
    assert last_boxed("\\boxed{3} then \\boxed{4") == "3"  # a truncated box is skipped
    assert last_boxed("\\fbox{7}") == "7"
    assert last_boxed("\\boxed 5") == "5"
    assert last_boxed("no box") is None
    t0 = time.monotonic()
    assert last_boxed("\\boxed{" * 200_000) is None  # 1.4 MB of unclosed boxes
    assert time.monotonic() - t0 < HANG_GUARD_S  # a hang guard: quadratic time here would take hours


@given(st.text(max_size=300), st.sampled_from(["choice", "exact", "numeric"]))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_grade_never_raises_and_garbage_is_never_error(response, kind):
    ref = {"choice": "C", "exact": "Paris", "numeric": "42"}[kind]
    res = grade(kind, response, ref)
    assert res.verdict in (C, W)
    if res.verdict is W and res.extracted is None:
        assert res.detail


def test_grade_dispatch_and_unknown_kind(mg):
    with pytest.raises(ValueError) as info:
        grade("regex", "x", "y")
    for kind in ("math", "choice", "exact", "numeric"):
        assert kind in str(info.value)
    assert grade("choice", "(A)", "A").verdict is C
    assert grade("choice", "The answer is F", "F", n_choices=6).verdict is C
    assert grade("exact", "paris", "Paris").verdict is C
    assert grade("numeric", "#### 3", "3").verdict is C
    assert grade("math", "\\boxed{\\frac{1}{2}}", "0.5", math=mg).verdict is C
    assert grade("math", None, "3", math=mg).verdict is E  # no response: not the policy's fault
    assert grade("math", "\\boxed{3}", "", math=mg).verdict is E  # empty reference: data error


# ---------------------------------------------------------------------------
# math-verify


def _math500_answers() -> set[str]:
    with open(MATH500) as f:
        return {json.loads(line)["answer"] for line in f}


# (reference exactly as in MATH-500, an equivalent response, a wrong response)
MATH_PAIRS = [
    ("\\frac{14}{3}", "Thus $\\boxed{\\dfrac{14}{3}}$.", "\\boxed{\\frac{13}{3}}"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3, \\pi/2)}", "\\boxed{(3, \\pi)}"),
    ("3\\sqrt{13}", "\\boxed{\\sqrt{117}}", "\\boxed{\\sqrt{113}}"),
    ("90^\\circ", "The angle is \\boxed{90}.", "\\boxed{80^\\circ}"),
    ("\\frac{3}{56}", "\\boxed{3/56}", "\\boxed{3/65}"),
    ("6 - 5i", "\\boxed{-5i + 6}", "\\boxed{6 + 5i}"),
    ("x=5", "\\boxed{5}", "\\boxed{x = 6}"),
    ("1,-2", "\\boxed{-2, 1}", "\\boxed{1, 2}"),
    ("11\\sqrt2", "\\boxed{11\\sqrt{2}}", "\\boxed{12\\sqrt{2}}"),
    ("3, 5, 7", "\\boxed{7, 5, 3}", "\\boxed{3, 5}"),
    ("1.25", "\\boxed{\\frac{5}{4}}", "\\boxed{\\frac{4}{5}}"),
    ("-\\frac{\\pi}{6}", "\\boxed{-\\pi/6}", "\\boxed{\\frac{\\pi}{6}}"),
    ("0.15", "\\boxed{\\frac{3}{20}}", "\\boxed{0.16}"),
    ("(6,31,-1)", "\\boxed{(6, 31, -1)}", "\\boxed{(6, 31, 1)}"),
    ("\\frac{3\\sqrt{3}}{4}", "\\boxed{\\frac{3}{4}\\sqrt{3}}", "\\boxed{\\frac{3\\sqrt{2}}{4}}"),
    ("(3,4]", "\\boxed{(3, 4]}", "\\boxed{(3, 4)}"),
    ("\\text{Evelyn}", "\\boxed{\\text{Evelyn}}", "\\boxed{\\text{Bob}}"),
    ("x^5 - x^4 + x^3 - x^2 + x - 1", "\\boxed{x^5-x^4+x^3-x^2+x-1}", "\\boxed{x^5-x^4+x^3-x^2+x+1}"),
    (
        "\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}",
        "\\boxed{\\begin{pmatrix} -\\frac13 \\\\ \\frac23 \\\\ \\frac53 \\end{pmatrix}}",
        "\\boxed{\\begin{pmatrix} 1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}}",
    ),
    ("1 \\pm \\sqrt{19}", "\\boxed{1+\\sqrt{19}, 1-\\sqrt{19}}", "\\boxed{1 + \\sqrt{19}}"),
    ("\\frac{1}{2}", "\\boxed{0.5}", "\\boxed{0.25}"),
    ("\\frac{1}{2}", "\\boxed{\\dfrac12}", "\\boxed{\\dfrac21}"),
    ("\\text{(C)}", "\\boxed{C}", "\\boxed{B}"),
    ("2k+2", "\\boxed{2(k+1)}", "\\boxed{2k+1}"),
    (
        "(-\\infty, 2) \\cup (3, \\infty)",
        "\\boxed{(-\\infty,2)\\cup(3,\\infty)}",
        "\\boxed{(-\\infty,2]\\cup(3,\\infty)}",
    ),
    ("p - q", "So the sum equals $p - q$.", "So the sum equals $q - p$."),  # no box: math-verify extracts
    ("\\frac{14}{3}", "<think>maybe 5</think>The final answer is $\\frac{14}{3}$", "The final answer is $5$"),
]


@pytest.mark.skipif(
    not MATH500.is_file(), reason=f"{MATH500} absent (the shared data folder sits beside the repository)"
)
def test_math_pairs_are_real_math500_answers():
    answers = _math500_answers()
    for ref, _, _ in MATH_PAIRS:
        assert ref in answers, ref
    assert len({ref for ref, _, _ in MATH_PAIRS}) >= 15


@pytest.mark.parametrize("ref, good, bad", MATH_PAIRS, ids=[p[0][:24] for p in MATH_PAIRS])
def test_math_equivalent_and_perturbed(mg, ref, good, bad):
    res = mg.grade(good, ref)
    assert res.verdict is C, res
    assert res.extracted
    res = mg.grade(bad, ref)
    assert res.verdict is W, res


def test_math_percent_and_no_answer(mg):
    assert mg.grade("\\boxed{10}", "10\\%").verdict is C
    assert mg.grade("\\boxed{10\\%}", "10").verdict is C
    for response in ("", "   ", "I could not solve it.", "\\boxed{}", "<think>\\boxed{3}</think>"):
        res = mg.grade(response, "3")
        assert res.verdict is W and res.extracted is None and res.detail, (response, res)


def test_math_long_responses_are_bounded(mg):
    # Only the tail matters without a box; a huge boxed answer is the policy's fault.
    res = mg.grade("blah " * 200_000 + "so the answer is $42$.", "42")
    assert res.verdict is C
    res = mg.grade("\\boxed{" + "1+" * MAX_BOXED_CHARS + "1}", "3")
    assert res.verdict is W and "too long" in res.detail
    res = mg.grade("\\boxed{" * 300_000, "3")  # 2 MB of unclosed boxes
    assert res.verdict is W


@pytest.mark.slow
def test_math_hang_is_error_then_recovers(monkeypatch):
    monkeypatch.setenv(TEST_HANG_ENV, "HANG-NOW")
    with MathGrader(timeout_s=1.0) as grader:
        grader.warm_up()
        first = grader.child_pid
        t0 = time.monotonic()
        res = grader.grade("\\boxed{HANG-NOW}", "3")
        elapsed = time.monotonic() - t0
        assert res.verdict is E and "timed out after 1s" in res.detail
        assert 1.0 <= elapsed < HANG_GUARD_S  # not before its time; the bound is only a hang guard
        assert _wait_dead(first, HANG_GUARD_S), "the hung child must be killed"
        assert grader.child_pid is None
        assert grader.grade("\\boxed{3}", "3").verdict is C  # a fresh child, lazily
        assert grader.child_pid not in (None, first) and grader.restarts == 1


def test_math_child_killed_externally(mg):
    pid = mg.child_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    res = mg.grade("\\boxed{\\frac{14}{3}}", "\\frac{14}{3}")  # no sleep: the race is part of the test
    assert res.verdict is C
    assert mg.child_pid not in (None, pid)


def test_math_close_leaves_no_child():
    grader = MathGrader()
    grader.warm_up()
    pid = grader.child_pid
    assert _alive(pid)
    grader.close()
    assert not _alive(pid)
    grader.close()  # idempotent
    with pytest.raises(RuntimeError):
        grader.grade("\\boxed{1}", "1")
    assert grade("math", "\\boxed{1}", "1", math=grader).verdict is E


def test_math_child_env_has_no_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    monkeypatch.setenv("MY_DB_PASSWORD", "pw")
    monkeypatch.setenv("CONDUCTOR_RL_HARMLESS", "yes")
    with MathGrader() as grader:
        grader.warm_up()
        env = Path(f"/proc/{grader.child_pid}/environ").read_bytes().split(b"\0")
    names = {e.split(b"=", 1)[0] for e in env if e}
    assert b"CONDUCTOR_RL_HARMLESS" in names
    for secret in (b"OPENAI_API_KEY", b"HF_TOKEN", b"MY_DB_PASSWORD"):
        assert secret not in names


_CHILD_OWNER = textwrap.dedent(
    """
    import sys, time
    from conductor_rl.grading import MathGrader
    g = MathGrader()
    g.warm_up()
    print(g.child_pid, flush=True)
    if sys.argv[1] == "exit":
        sys.exit(0)       # no close(): the finalizer must kill the child at exit
    time.sleep(60)        # the test SIGKILLs us: the child must notice and exit
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_no_child_outlives_its_parent(how):
    owner = subprocess.Popen([sys.executable, "-c", _CHILD_OWNER, how], stdout=subprocess.PIPE, cwd=ROOT, text=True)
    try:
        pid = int(owner.stdout.readline())
        if how == "sigkill":
            owner.kill()
        owner.wait(timeout=30)
        assert _wait_dead(pid, 5.0)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_math_threads_concurrently(mg):
    jobs = []
    for i in range(1, 41):
        jobs.append((f"\\boxed{{\\frac{{{2 * i}}}{{4}}}}", f"{i / 2}", C))
        jobs.append((f"The result is ${i + 1}$.", f"{i}", W))
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda j: mg.grade(j[0], j[1]).verdict, jobs))
    assert results == [j[2] for j in jobs]


@pytest.mark.slow
def test_math_threads_during_timeout(monkeypatch):
    """A timeout in one thread does not corrupt the answers other threads get."""
    monkeypatch.setenv(TEST_HANG_ENV, "HANG-NOW")
    with MathGrader(timeout_s=1.0) as grader:
        grader.warm_up()
        jobs = [("\\boxed{HANG-NOW}", "1", E)] + [(f"\\boxed{{{i}}}", str(i), C) for i in range(12)]
        jobs += [(f"\\boxed{{{i}}}", str(i + 1), W) for i in range(12)]
        with ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(lambda j: grader.grade(j[0], j[1]).verdict, jobs))
    assert results == [j[2] for j in jobs]


@given(st.text(max_size=200))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_math_garbage_is_never_error(mg, response):
    res = mg.grade(response, "\\frac{14}{3}")
    assert res.verdict in (C, W), res


def test_math_grades_reuse_one_warm_child(mg):
    # What keeps grading fast: one child, warmed once, grades every response (its speed is a benchmark's
    # business). Distinct responses, so math-verify's parse cache does not answer for the child.
    mg.warm_up()
    child, restarts = mg.child_pid, mg.restarts
    for i in range(50):
        assert mg.grade(f"so the value is \\boxed{{\\frac{{{i}}}{{7}}}}", f"\\frac{{{i}}}{{7}}").verdict is C
    assert (mg.child_pid, mg.restarts) == (child, restarts)
