"""Hand-written cases for conductor_rl.plan.language: reading, validating and rendering plans."""

from __future__ import annotations

import pickle
import time

import pytest

from conductor_rl.plan import (
    MAX_TEXT_CHARS,
    Plan,
    PlanError,
    Step,
    language,
    parse_plan,
    render_plan,
)

PAPER = """model_id = [2, 0]
subtasks = ["Develop an efficient algorithm to count complete subarrays",
            "Implement the algorithm described by the previous agent in Python"]
access_list = [[], "all"]"""

PAPER_PLAN = Plan(
    (
        Step(2, "Develop an efficient algorithm to count complete subarrays", []),
        Step(0, "Implement the algorithm described by the previous agent in Python", "all"),
    )
)

VALID_TAIL = 'subtasks = ["a", "b"]\naccess_list = [[], "all"]'


def plan_text(model_id: str = "[0, 1]", subtasks: str = '["a", "b"]', access: str = '[[], "all"]') -> str:
    return f"model_id = {model_id}\nsubtasks = {subtasks}\naccess_list = {access}\n"


def reason_of(text: str, n_workers: int = 3, **kw) -> str:
    with pytest.raises(PlanError) as info:
        parse_plan(text, n_workers, **kw)
    assert str(info.value) == info.value.reason
    return info.value.reason


# --------------------------------------------------------------------------- #
# Reading well-formed completions
# --------------------------------------------------------------------------- #


def test_paper_example():
    assert parse_plan(PAPER, n_workers=3) == PAPER_PLAN


def test_reasoning_before_the_lists():
    text = (
        "The question asks for an algorithm. Model 2 is strong at maths, so it plans;\n"
        "Model 0 writes code. I'll give the coder all context.\n\n" + PAPER
    )
    assert parse_plan(text, 3) == PAPER_PLAN


@pytest.mark.parametrize("fence", ["```python", "```", "```py", "~~~"])
def test_code_fences(fence):
    closing = "~~~" if fence == "~~~" else "```"
    text = f"Here is my plan:\n{fence}\n{PAPER}\n{closing}\nThat should work."
    assert parse_plan(text, 3) == PAPER_PLAN


def test_indented_assignments_count():
    text = "    model_id = [1]\n\tsubtasks = ['x']\n  access_list = [[]]"
    assert parse_plan(text, 3) == Plan((Step(1, "x", []),))


def test_whitespace_around_equals_is_free():
    text = "model_id=[1]\nsubtasks   =\t['x']\naccess_list =[[]]"
    assert parse_plan(text, 3) == Plan((Step(1, "x", []),))


def test_several_attempts_last_complete_wins():
    first = plan_text("[0, 0]", '["draft 1", "draft 2"]', "[[], []]")
    second = plan_text("[1, 2]", '["final 1", "final 2"]', "[[], [0]]")
    plan = parse_plan("Draft:\n" + first + "\nOn reflection:\n" + second, 3)
    assert plan == Plan((Step(1, "final 1", []), Step(2, "final 2", [0])))


def test_truncated_last_attempt_keeps_earlier_complete_one():
    first = plan_text()
    cut_off = 'Let me refine.\nmodel_id = [2, 2]\nsubtasks = ["a longer first subt'
    plan = parse_plan(first + cut_off, 3)
    # model_id's new attempt was complete and wins; subtasks' was cut off.
    assert [s.model_id for s in plan.steps] == [2, 2]
    assert [s.subtask for s in plan.steps] == ["a", "b"]


def test_truncated_inside_brackets_is_ignored():
    text = plan_text() + "access_list = [[], [0"
    assert parse_plan(text, 3).steps[1].access == "all"


def test_abandoned_open_bracket_followed_by_new_attempt():
    text = "model_id = [0, 1\nmodel_id = [2, 1]\n" + VALID_TAIL
    assert [s.model_id for s in parse_plan(text, 3).steps] == [2, 1]


def test_names_are_read_independently():
    # Each name takes its own last complete assignment, wherever it is.
    text = 'access_list = [[], "all"]\nprose\nmodel_id = [1, 1]\nmore prose\nsubtasks = ["p", "q"]'
    assert parse_plan(text, 3) == Plan((Step(1, "p", []), Step(1, "q", "all")))


def test_comments_inside_and_after_lists():
    text = """model_id = [  # workers
    2,  # the planner
    0,  # the coder ]]]
]  # done
subtasks = ["a",  # first
            "b"]  # second
access_list = [[], "all"]  # "the coder sees everything"
"""
    assert parse_plan(text, 3) == Plan((Step(2, "a", []), Step(0, "b", "all")))


@pytest.mark.parametrize(
    "literal, expected",
    [
        ("'single quotes'", "single quotes"),
        ('"double quotes"', "double quotes"),
        ('"""triple\ndouble"""', "triple\ndouble"),
        ("'''triple\nsingle'''", "triple\nsingle"),
        (r'"escaped \"quotes\" inside"', 'escaped "quotes" inside'),
        (r"'it\'s escaped'", "it's escaped"),
        ('"it\'s mixed"', "it's mixed"),
        (r'"back\\slash"', "back\\slash"),
        ('"use list [1,2] and (3, 4"', "use list [1,2] and (3, 4"),
        ('"# not a comment ]"', "# not a comment ]"),
        ('"model_id = [9]"', "model_id = [9]"),
        ('r"raw \\d+"', "raw \\d+"),
        ('"implicit " "concatenation"', "implicit concatenation"),
        ('"unicode: ∑ 数学 😀"', "unicode: ∑ 数学 😀"),
    ],
)
def test_string_forms(literal, expected):
    text = f"model_id = [0]\nsubtasks = [{literal}]\naccess_list = [[]]"
    assert parse_plan(text, 1).steps[0].subtask == expected


def test_multiline_triple_quoted_subtask_holding_an_assignment_line():
    text = 'model_id = [0]\nsubtasks = ["""Write code that sets\nmodel_id = [5]\nand prints it"""]\naccess_list = [[]]'
    plan = parse_plan(text, 1)
    assert plan.steps[0].subtask == "Write code that sets\nmodel_id = [5]\nand prints it"


def test_crlf_line_endings():
    assert parse_plan(PAPER.replace("\n", "\r\n"), 3) == PAPER_PLAN


def test_semicolon_and_fence_after_list():
    text = "```python\nmodel_id = [0];\nsubtasks = ['x']  ;  # ok\naccess_list = [[]]```"
    assert parse_plan(text, 1) == Plan((Step(0, "x", []),))


# --------------------------------------------------------------------------- #
# Which lines count as assignments
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "decoy",
    [
        "foo_model_id = [9, 9]",
        "model_ids = [9, 9]",
        "my.model_id = [9, 9]",
        "x = 1; model_id = [9, 9]",
        "The answer is model_id = [9, 9] as shown",
        "model_id == [9, 9]",
        "# model_id = [9, 9]",
        "> model_id = [9, 9]",
    ],
)
def test_decoys_do_not_count(decoy):
    # Put the decoy after the real plan: if it counted it would win (9 is out of range).
    assert parse_plan(plan_text() + decoy + "\n", 3).steps[0].model_id == 0


# --------------------------------------------------------------------------- #
# Access lists
# --------------------------------------------------------------------------- #


def test_explicit_access_lists_are_deduplicated_and_sorted():
    text = plan_text("[0, 1, 2, 0]", '["a", "b", "c", "d"]', "[[], [0], [1, 0, 1], [2, 0]]")
    assert [s.access for s in parse_plan(text, 3).steps] == [[], [0], [0, 1], [0, 2]]


@pytest.mark.parametrize("spelling", ['"all"', "'all'", '"ALL"', '"All"', '" all "'])
def test_all_spellings(spelling):
    assert parse_plan(plan_text(access=f"[[], {spelling}]"), 3).steps[1].access == "all"


def test_tuples_are_read_as_lists():
    text = "model_id = (0, 1)\nsubtasks = ('a', 'b')\naccess_list = ((), (0,))"
    assert parse_plan(text, 3) == Plan((Step(0, "a", []), Step(1, "b", [0])))


def test_bare_tuple_value():
    text = "model_id = 0, 1\nsubtasks = 'a', 'b'\naccess_list = [], 'all'"
    assert parse_plan(text, 3) == Plan((Step(0, "a", []), Step(1, "b", "all")))


def test_all_at_step_zero_means_nothing_earlier():
    plan = parse_plan(plan_text("[0]", '["a"]', '["all"]'), 3)
    assert plan.steps[0].access == "all" and plan.visible(0) == []


def test_visible():
    plan = parse_plan(plan_text("[0, 1, 2, 0]", '["a", "b", "c", "d"]', '[[], "all", [0], "all"]'), 3)
    assert [plan.visible(i) for i in range(4)] == [[], [0], [0], [0, 1, 2]]
    with pytest.raises(IndexError):
        plan.visible(4)
    with pytest.raises(IndexError):
        plan.visible(-1)


# --------------------------------------------------------------------------- #
# Every PlanError reason
# --------------------------------------------------------------------------- #


def test_missing_lists_are_named():
    reason = reason_of("model_id = [0]\nI am not sure what else to write.")
    assert "subtasks" in reason and "access_list" in reason and "model_id =" not in reason


def test_missing_everything():
    reason = reason_of("I refuse to plan.")
    assert all(name in reason for name in ("model_id", "subtasks", "access_list"))


def test_missing_list_notes_a_cut_off_attempt():
    reason = reason_of('model_id = [0]\nsubtasks = ["a"]\naccess_list = [[')
    assert "access_list" in reason and "cut off" in reason


@pytest.mark.parametrize("value, shown", [("0", "0"), ('"[0, 1]"', "'[0, 1]'"), ("None", "None")])
def test_not_a_list(value, shown):
    reason = reason_of(plan_text(model_id=value))
    assert "model_id must be a list" in reason and shown in reason


def test_unequal_lengths_give_each_length():
    reason = reason_of(plan_text("[0, 1, 2]", '["a", "b"]', '[[], "all"]'))
    assert "model_id has 3" in reason and "subtasks has 2" in reason and "access_list has 2" in reason


def test_too_many_steps():
    text = plan_text("[0, 0, 0]", '["a", "b", "c"]', "[[], [], []]")
    reason = reason_of(text, max_steps=2)
    assert "3 steps" in reason and "at most 2" in reason
    assert len(parse_plan(text, 3, max_steps=3).steps) == 3


@pytest.mark.parametrize(
    "ids, needle",
    [
        ("[True, 0]", "True (bool)"),
        ("[0, False]", "False (bool)"),
        ("[1.0, 0]", "1.0 (float)"),
        ('["0", 1]', "'0' (str)"),
        ("[[0], 1]", "[0] (list)"),
    ],
)
def test_model_id_not_an_int(ids, needle):
    reason = reason_of(plan_text(model_id=ids))
    assert "must be an int worker id" in reason and needle in reason


@pytest.mark.parametrize("ids, bad", [("[0, 3]", "3"), ("[-1, 0]", "-1")])
def test_model_id_out_of_range(ids, bad):
    reason = reason_of(plan_text(model_id=ids), n_workers=3)
    assert "model_id[" in reason and f"is {bad}, not a worker id" in reason and "0 to 2" in reason


@pytest.mark.parametrize(
    "access, needle",
    [
        ("[[], [1]]", "refers to step 1, which is not an earlier step"),  # the same step
        ("[[], [0, 5]]", "refers to step 5"),  # a later step
        ('[[0], "all"]', "step 0 may read no earlier step"),
        ("[[], [-1]]", "not negative"),
        ("[[], [True]]", "True (bool), which is not a step index"),
        ('[[], ["0"]]', "'0' (str), which is not a step index"),
        ('[[], "none"]', "got 'none' (str)"),
        ("[[], None]", "got None (NoneType)"),
        ("[[], 0]", "got 0 (int)"),
    ],
)
def test_bad_access_entries(access, needle):
    reason = reason_of(plan_text(access=access))
    assert "access_list[" in reason and needle in reason


@pytest.mark.parametrize(
    "subtasks, needle",
    [
        ('["a", 7]', "subtasks[1] must be a string, got 7 (int)"),
        ('["a", b"bytes"]', "subtasks[1] must be a string"),
        ('["", "b"]', "subtasks[0] is empty"),
        ('["a", " \\n\\t "]', "subtasks[1] is empty"),
    ],
)
def test_bad_subtasks(subtasks, needle):
    assert needle in reason_of(plan_text(subtasks=subtasks))


def test_zero_steps_and_allow_empty():
    empty = "model_id = []\nsubtasks = []\naccess_list = []"
    assert "no steps" in reason_of(empty)
    assert parse_plan(empty, 3, allow_empty=True) == Plan(())
    # "Stop" needs all three empty; otherwise it is a length mismatch.
    assert "model_id has 0" in reason_of(plan_text("[]"), allow_empty=True)


@pytest.mark.parametrize(
    "ids, needle",
    [
        ("[os.system('touch x')]", "a function call"),
        ("[x]", "the name 'x'"),
        ('[f"{x}"]', "an f-string"),
        ("[i for i in range(2)]", "a comprehension"),
        ("list(range(2))", "a function call"),
        ("[1 + 1]", "operators"),
        ("[{0: 1}]", "a dict or set"),
        ("[*a]", "a starred expression"),
        ("[a.b]", "Attribute"),
    ],
)
def test_non_literals_are_refused(ids, needle):
    reason = reason_of(plan_text(model_id=ids))
    assert "must be a plain literal" in reason and needle in reason


def test_non_literals_are_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    call = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    for text in (
        plan_text(model_id=f"[{call}]"),
        plan_text(subtasks=f"[{call}, 'b']"),
        plan_text(access=f"[[], [{call}]]"),
        plan_text(model_id=f"[0, 1] if {call} else [0]"),
        plan_text(subtasks=f'[f"{{{call}}}", "b"]'),
    ):
        with pytest.raises(PlanError):
            parse_plan(text, 3)
    assert not marker.exists()


def test_junk_after_the_closing_bracket():
    reason = reason_of(plan_text(model_id="[0] + [1]"))
    assert "unexpected text after the model_id list" in reason and "+ [1]" in reason


def test_malformed_final_attempt_overrides_earlier_valid_one():
    # A complete but broken last word is judged (not silently replaced by a draft).
    text = plan_text() + "Final answer:\nmodel_id = [0, 1,, 2]\n"
    assert "model_id is not valid Python" in reason_of(text)


@pytest.mark.parametrize(
    "ids, needle",
    [
        ("[0, 1,, 2]", "not valid Python"),
        ("", "no value after '='"),
        ("[0, 1)", "unbalanced brackets"),
        ("['a\nb', 1]", "not closed on its line"),
    ],
)
def test_syntax_problems(ids, needle):
    assert needle in reason_of(plan_text(model_id=ids))


# --------------------------------------------------------------------------- #
# Hostile inputs: fail fast with PlanError, never another exception
# --------------------------------------------------------------------------- #


# A bound on a wait that only a hang reaches, never a slow machine: the inputs below are a few hundred
# kilobytes at most, where quadratic work (or worse) takes hours.
HANG_GUARD_S = 30.0


def _fails_fast(text: str) -> str:
    start = time.perf_counter()
    reason = reason_of(text)
    assert time.perf_counter() - start < HANG_GUARD_S
    return reason


def _calls_to(stage: str, monkeypatch) -> list[tuple]:
    """The arguments of every call to `stage`, a function of conductor_rl.plan.language (which still
    runs): what is cheap to refuse must be refused before the costly part."""
    calls: list[tuple] = []
    real = getattr(language, stage)
    monkeypatch.setattr(language, stage, lambda *args: calls.append(args) or real(*args))
    return calls


def test_ten_megabyte_completion(monkeypatch):
    scans = _calls_to("_find_values", monkeypatch)
    reason = _fails_fast("reasoning " * 1_000_000 + PAPER)
    assert "too long" in reason and str(MAX_TEXT_CHARS) in reason
    assert scans == []  # refused by its length, unread


def test_million_element_list(monkeypatch):
    scans = _calls_to("_find_values", monkeypatch)
    assert "too" in _fails_fast("model_id = [" + "0, " * 1_000_000 + "]\n" + VALID_TAIL)
    assert scans == []


def test_many_elements_within_the_text_cap(monkeypatch):
    literals = _calls_to("_read_literal", monkeypatch)
    assert "too many elements" in _fails_fast("model_id = [" + "0," * 5000 + "0]\n" + VALID_TAIL)
    assert "model_id" not in [name for _, name in literals]  # refused by the scan, never compiled


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        "model_id = " + "[" * 100_000,
        "model_id = " + "[" * 50 + "]" * 50 + "\n" + VALID_TAIL,
        "model_id = " + "(" * 100_000 + ")" * 100_000 + "\n" + VALID_TAIL,
        "model_id = [" + "-" * 90_000 + "1]\n" + VALID_TAIL,
        "model_id = [" + "1+" * 40_000 + "1]\n" + VALID_TAIL,
        "model_id = [0]\nsubtasks = [" + "not " * 20_000 + "1]\naccess_list = [[]]",
        "model_id = [" + "9" * 50_000 + "]\n" + VALID_TAIL,
        "model_id = [0x" + "f" * 50_000 + "]\n" + VALID_TAIL,
        "model_id = [\x00]\n" + VALID_TAIL,
        "model_id = [0]\nsubtasks = ['\ud800']\naccess_list = [[]]",
        "model_id = [\n" * 20_000,
        "model_id = '''\nsubtasks = \"\"\"\n" * 5_000,
        "model_id = [" + "'a'" * 60_000,
    ],
)
def test_hostile_inputs(text):
    _fails_fast(text)


# --------------------------------------------------------------------------- #
# Rendering
# --------------------------------------------------------------------------- #


def test_render_paper_plan():
    assert render_plan(PAPER_PLAN) == (
        "model_id = [2, 0]\n"
        'subtasks = ["Develop an efficient algorithm to count complete subarrays", '
        '"Implement the algorithm described by the previous agent in Python"]\n'
        'access_list = [[], "all"]'
    )


def test_render_round_trips_awkward_subtasks():
    subtasks = [
        'say "hi"',
        "it's",
        "both ' and \"",
        "line\nbreak\r\n and tab\t",
        "back\\slash \\n not a newline",
        "unicode ∑ 数学 😀 \u2028 \x00",
        "model_id = [9]\naccess_list = [[5]]",
        '"""triple"""',
    ]
    plan = Plan(tuple(Step(i % 2, s, "all" if i else []) for i, s in enumerate(subtasks[:5])))
    assert parse_plan(render_plan(plan), 2) == plan
    plan = Plan(tuple(Step(0, s, list(range(i))) for i, s in enumerate(subtasks[5:])))
    assert parse_plan(render_plan(plan), 1) == plan


def test_render_then_parse_of_a_parsed_plan():
    text = "reasoning\n```python\n" + plan_text("(1, 0)", "['x', 'y']", "[(), [0, 0]]") + "```"
    plan = parse_plan(text, 2)
    assert parse_plan(render_plan(plan), 2) == plan


def test_render_empty_plan_round_trips_with_allow_empty():
    assert parse_plan(render_plan(Plan(())), 3, allow_empty=True) == Plan(())


# --------------------------------------------------------------------------- #
# Types and calling conventions
# --------------------------------------------------------------------------- #


def test_plan_accepts_a_list_of_steps():
    assert Plan(list(PAPER_PLAN.steps)) == PAPER_PLAN
    assert isinstance(PAPER_PLAN.steps, tuple)


def test_plan_error_is_a_value_error_and_pickles():
    err = PlanError("model_id must be a list")
    assert isinstance(err, ValueError) and err.reason == "model_id must be a list"
    copy = pickle.loads(pickle.dumps(err))
    assert isinstance(copy, PlanError) and copy.reason == err.reason


def test_caller_bugs_are_not_plan_errors():
    with pytest.raises(ValueError) as info:
        parse_plan(PAPER, 0)
    assert not isinstance(info.value, PlanError)
    with pytest.raises(TypeError):
        parse_plan(None, 3)  # type: ignore[arg-type]


def test_invalid_escapes_are_read_quietly_even_when_warnings_are_errors():
    import warnings

    text = r"model_id = [0]" + "\n" + r'subtasks = ["match \d+ and \c"]' + "\naccess_list = [[]]"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_plan(text, 1).steps[0].subtask == "match \\d+ and \\c"
