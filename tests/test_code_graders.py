"""Code graders: extraction, HumanEval (all 164 through the real sandbox), stdin/stdout,
call-based and unittest suites, and the ERROR/WRONG boundary."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from conductor_rl import grading
from conductor_rl.data import load_humaneval
from conductor_rl.grading import Verdict, extract_code, grade, grade_code
from conductor_rl.grading.code import outputs_match
from conductor_rl.grading.sandbox import Sandbox
from conductor_rl.rollout.rollouts import grade_answer, run_rollout
from conductor_rl.rollout.workflow import Task
from conductor_rl.testing.workers import ScriptedWorker

pytestmark = pytest.mark.light  # starts no Ray, vLLM or learner: runs beside the heavy tests (conftest.py)

BOX = Sandbox(timeout_s=5)

# ---------------------------------------------------------------------------
# extraction


def test_last_python_block_wins():
    text = "First try:\n```python\ndef f():\n    return 1\n```\nBetter:\n```python\ndef f():\n    return 2\n```\nDone."
    assert extract_code(text) == "def f():\n    return 2\n"


def test_python_block_preferred_over_output_blocks():
    text = "```py\nprint(1)\n```\nOutput:\n```\n1\n```\n```bash\npython x.py\n```"
    assert extract_code(text) == "print(1)\n"


def test_untagged_block_when_no_python_block():
    assert extract_code("Here:\n```\nx = 1\n```\n") == "x = 1\n"


def test_reasoning_is_ignored():
    text = "<think>```python\nwrong()\n```</think>\n```python\nright()\n```"
    assert extract_code(text) == "right()\n"


def test_unclosed_fence_takes_the_rest():
    assert extract_code("Sure.\n```python\ndef g():\n    return 3\n") == "def g():\n    return 3\n"


def test_bare_code_and_prose_around_it():
    assert extract_code("def h(x):\n    return x\n") == "def h(x):\n    return x\n"
    text = "Here is my solution.\nimport math\n\ndef h(x):\n    return math.sqrt(x)\nThis runs in O(1)."
    assert extract_code(text) == "import math\n\ndef h(x):\n    return math.sqrt(x)\n"


def test_no_code():
    assert extract_code("I do not know.") is None
    assert extract_code("") is None
    assert extract_code("```python\n\n```") is None


# ---------------------------------------------------------------------------
# HumanEval


def _humaneval():
    return load_humaneval()


@pytest.mark.slow
def test_all_humaneval_canonical_solutions_pass_and_broken_ones_fail():
    questions = _humaneval()
    assert len(questions) == 164

    def both(q):
        good = grade("code_humaneval", "```python\n" + q.reference + "```", q.reference, meta=q.meta, sandbox=BOX)
        broken = grade("code_humaneval", q.meta["prompt"] + "    return None\n", q.reference, meta=q.meta, sandbox=BOX)
        return q.id, good, broken

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(both, questions))
    not_correct = [(i, g.detail) for i, g, _ in results if g.verdict is not Verdict.CORRECT]
    not_wrong = [(i, b.verdict, b.detail) for i, _, b in results if b.verdict is not Verdict.WRONG]
    assert not not_correct and not not_wrong


def test_humaneval_body_only_completion_and_helpers_from_the_prompt():
    q = next(q for q in _humaneval() if q.meta["entry_point"] == "decode_cyclic")  # uses the prompt's encode_cyclic
    body = q.reference[len(q.meta["prompt"]) :]
    assert grade_code("code_humaneval", body, q.meta, sandbox=BOX).verdict is Verdict.CORRECT


def test_early_exit_does_not_pass():
    q = _humaneval()[0]
    for trick in ("import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n", "raise SystemExit\n"):
        r = grade_code("code_humaneval", q.meta["prompt"] + "    return None\n" + trick, q.meta, sandbox=BOX)
        assert r.verdict is Verdict.WRONG, trick


def test_printing_does_not_break_the_verdict():
    q = _humaneval()[0]
    r = grade_code("code_humaneval", "print('debug')\n" + q.reference + "print('more')\n", q.meta, sandbox=BOX)
    assert r.verdict is Verdict.CORRECT


def test_hanging_answer_is_wrong_within_the_timeout():
    q = _humaneval()[0]
    r = grade_code(
        "code_humaneval", q.meta["prompt"] + "    while True:\n        pass\n", q.meta, sandbox=Sandbox(timeout_s=1)
    )
    assert r.verdict is Verdict.WRONG and "timed out" in r.detail


# ---------------------------------------------------------------------------
# stdin / stdout (LiveCodeBench style)

SUM_META = {
    "tests": [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "10 -4\n", "output": "6"},
        {"input": "0 0", "output": "0\n\n"},
    ]
}


def test_stdio_all_tests_pass():
    r = grade_code(
        "code_stdio", "```python\na, b = map(int, input().split())\nprint(a + b)\n```", SUM_META, sandbox=BOX
    )
    assert r.verdict is Verdict.CORRECT and "3 tests" in r.detail


def test_stdio_one_failing_test_is_wrong():
    code = "a, b = map(int, input().split())\nprint(a + b if a else 1)\n"
    r = grade_code("code_stdio", code, SUM_META, sandbox=BOX)
    assert r.verdict is Verdict.WRONG and "test 3/3" in r.detail


def test_stdio_crash_and_timeout_are_wrong():
    assert grade_code("code_stdio", "raise ValueError\n", SUM_META, sandbox=BOX).verdict is Verdict.WRONG
    meta = {**SUM_META, "timeout_s": 0.5}
    r = grade_code("code_stdio", "while True:\n    pass\n", meta, sandbox=BOX)
    assert r.verdict is Verdict.WRONG and "timed out" in r.detail


def test_output_comparison_is_whitespace_normalised():
    assert outputs_match("1  2\n3\n\n", "1 2\n3")
    assert outputs_match("0.3333333\n", "0.33333333")
    assert not outputs_match("1 2 3", "1 2\n3")
    assert not outputs_match("YES", "yes")
    assert not outputs_match("", "0")


# ---------------------------------------------------------------------------
# call-based (LiveCodeBench functional)

TWO_SUM_META = {
    "fn_name": "twoSum",
    "starter_code": "from typing import List\nclass Solution:\n"
    "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
    "tests": [
        {"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]"},
        {"input": "[3, 2, 4]\n6", "output": "[1, 2]"},
    ],
}
TWO_SUM = """
class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i, n in enumerate(nums):
            if target - n in seen:
                return (seen[target - n], i)
            seen[n] = i
"""


def test_call_based_solution_class():
    assert grade_code("code_call", TWO_SUM, TWO_SUM_META, sandbox=BOX).verdict is Verdict.CORRECT


def test_call_based_plain_function_and_wrong_answer():
    meta = {"fn_name": "square", "tests": [{"input": "3", "output": "9"}, {"input": "1.5", "output": "2.25"}]}
    assert grade_code("code_call", "def square(x):\n    return x * x\n", meta, sandbox=BOX).verdict is Verdict.CORRECT
    r = grade_code("code_call", "def square(x):\n    return x + x\n", meta, sandbox=BOX)
    assert r.verdict is Verdict.WRONG and "test 1/2: returned 6" in r.detail


def test_call_based_per_test_timeout_and_print_noise():
    meta = {"fn_name": "f", "timeout_s": 0.5, "tests": [{"input": "1", "output": "1"}, {"input": "2", "output": "2"}]}
    code = "def f(x):\n    print('noise', x)\n    while x == 2:\n        pass\n    return x\n"
    r = grade_code("code_call", code, meta, sandbox=BOX)
    assert r.verdict is Verdict.WRONG
    assert (
        grade_code("code_call", "def f(x):\n    print('[1]')\n    return x\n", meta, sandbox=BOX).verdict
        is Verdict.CORRECT
    )


def test_call_based_missing_function_is_wrong():
    r = grade_code("code_call", "def other():\n    pass\n", TWO_SUM_META, sandbox=BOX)
    assert r.verdict is Verdict.WRONG


# ---------------------------------------------------------------------------
# unittest suites (BigCodeBench style)

BCB_META = {
    "entry_point": "task_func",
    "prompt": 'import math\n\ndef task_func(values):\n    """Return the rounded square roots."""\n',
    "test": (
        "import unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_basic(self):\n        self.assertEqual(task_func([4, 9]), [2, 3])\n"
        "    def test_empty(self):\n        self.assertEqual(task_func([]), [])\n"
    ),
}


def test_unittest_suite_passes_and_fails():
    good = "def task_func(values):\n    return [round(math.sqrt(v)) for v in values]\n"
    assert grade_code("code_unittest", good, BCB_META, sandbox=BOX).verdict is Verdict.CORRECT
    bad = "def task_func(values):\n    return [v for v in values]\n"
    assert grade_code("code_unittest", bad, BCB_META, sandbox=BOX).verdict is Verdict.WRONG


def test_unittest_suite_with_no_tests_is_not_a_pass():
    meta = {**BCB_META, "test": "import unittest\n"}
    good = "def task_func(values):\n    return [round(math.sqrt(v)) for v in values]\n"
    assert grade_code("code_unittest", good, meta, sandbox=BOX).verdict is Verdict.WRONG


# ---------------------------------------------------------------------------
# ERROR versus WRONG


def test_no_code_is_wrong_and_missing_tests_are_errors():
    assert grade_code("code_stdio", "no idea", SUM_META, sandbox=BOX).verdict is Verdict.WRONG
    assert grade_code("code_stdio", "print(1)", {}, sandbox=BOX).verdict is Verdict.ERROR
    assert grade_code("code_stdio", "print(1)", None, sandbox=BOX).verdict is Verdict.ERROR
    assert (
        grade_code(
            "code_call", "print(1)", {"fn_name": "f", "tests": [{"input": "1", "output": "not json"}]}, sandbox=BOX
        ).verdict
        is Verdict.ERROR
    )
    assert (
        grade_code("code_humaneval", "print(1)", {"test": "def check(c): pass"}, sandbox=BOX).verdict is Verdict.ERROR
    )


def test_sandbox_failure_is_an_error_not_wrong():
    broken = Sandbox(python="/nonexistent/python3")
    r = grade_code("code_stdio", "print(3)", SUM_META, sandbox=broken)
    assert r.verdict is Verdict.ERROR and "sandbox failed" in r.detail
    assert grading.reward(True, r.verdict) is None


def test_code_kinds_are_registered():
    assert {"code_humaneval", "code_stdio", "code_call", "code_unittest", "freeform"} <= set(grading.KINDS)


# ---------------------------------------------------------------------------
# through the rollout


def test_grade_answer_uses_the_tasks_meta():
    q = _humaneval()[2]
    task = Task(
        id=q.id, question=q.question, domain="code", reference=q.reference, answer_kind="code_humaneval", meta=q.meta
    )
    assert grade_answer(task, q.reference).verdict is Verdict.CORRECT
    assert grade_answer(task, "nothing").verdict is Verdict.WRONG
    stdio = Task(id="t", question="add", domain="code", reference="", answer_kind="code_stdio", meta=SUM_META)
    assert grade_answer(stdio, "print(sum(map(int, input().split())))").verdict is Verdict.CORRECT
    hash(task)  # still hashable with a dict inside


def test_run_rollout_rewards_code():
    q = _humaneval()[0]
    task = Task(
        id=q.id, question=q.question, domain="code", reference=q.reference, answer_kind="code_humaneval", meta=q.meta
    )
    plan = 'model_id = [0]\nsubtasks = ["write it"]\naccess_list = [[]]'
    good = asyncio.run(run_rollout(plan, task, [ScriptedWorker("fixed", text="```python\n" + q.reference + "```")]))
    wrong = "```python\ndef has_close_elements(a, b):\n    return 1\n```"
    bad = asyncio.run(run_rollout(plan, task, [ScriptedWorker("fixed", text=wrong)]))
    assert (good.reward, bad.reward) == (1.0, 0.5)
    assert json.dumps(good.to_dict())


def test_call_answers_may_use_the_names_a_judge_provides_without_importing_them():
    # LeetCode-style answers use List, deque, heapq... as the judge's harness imports them.
    code = (
        "class Solution:\n    def firstTwo(self, nums: List[int]) -> List[int]:\n"
        "        q = deque(nums)\n        heapify(nums)\n        return [q.popleft(), q.popleft()]\n"
    )
    meta = {"fn_name": "firstTwo", "tests": [{"input": "[3, 1, 2]", "output": "[3, 1]"}]}
    assert grade_code("code_call", code, meta, sandbox=BOX).verdict is Verdict.CORRECT
