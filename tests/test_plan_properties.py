"""Property tests for conductor_rl.plan.language: round-trips, and no input raises anything but PlanError."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor_rl.plan import NAMES, Plan, PlanError, Step, parse_plan, render_plan

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

N_WORKERS = 4
MAX_STEPS = 5


@st.composite
def plans(draw, n_workers: int = N_WORKERS, max_steps: int = MAX_STEPS) -> Plan:
    n = draw(st.integers(1, max_steps))
    steps = []
    for i in range(n):
        access = draw(
            st.one_of(
                st.just("all"),
                st.lists(st.integers(0, i - 1), max_size=i, unique=True).map(sorted) if i else st.just([]),
            )
        )
        steps.append(
            Step(
                model_id=draw(st.integers(0, n_workers - 1)),
                subtask=draw(st.text(min_size=1).filter(lambda s: s.strip())),
                access=access,
            )
        )
    return Plan(tuple(steps))


def parse_or_plan_error(text: str, **kw) -> Plan | None:
    """Parse, allowing only PlanError to escape (returned as None)."""
    try:
        return parse_plan(text, N_WORKERS, MAX_STEPS, **kw)
    except PlanError as err:
        assert isinstance(err.reason, str) and err.reason
        return None


# Fragments that drive the scanner through its states: names at line starts,
# brackets, every quote kind, escapes, comments, fences, commas, line ends.
TOKENS = st.sampled_from(
    [
        "model_id = ",
        "subtasks = ",
        "access_list = ",
        "model_id=",
        "\n",
        "\r\n",
        " ",
        "\t",
        "[",
        "]",
        "(",
        ")",
        "{",
        "}",
        ",",
        "'",
        '"',
        "'''",
        '"""',
        "\\",
        "#",
        "```",
        "```python\n",
        "0",
        "1",
        "3",
        "-1",
        "True",
        "1.5",
        "0x1f",
        '"all"',
        "'ALL'",
        "x",
        "os.system('x')",
        'f"{x}"',
        "[]",
        "[[], 'all']",
        "; ",
        "+",
        "*",
        "=",
        ":=",
        "lambda: 0",
        "\x00",
        "é",
        "数",
    ]
)
TOKEN_SOUP = st.lists(TOKENS, max_size=60).map("".join)


@FAST
@given(plans())
def test_render_then_parse_round_trips(plan):
    assert parse_plan(render_plan(plan), N_WORKERS, MAX_STEPS) == plan


@FAST
@given(plans())
def test_spacing_and_comments_do_not_change_the_plan(plan):
    lines = []
    for line in render_plan(plan).split("\n"):
        name, value = line.split(" = ", 1)
        lines.append(f"  {name}={value}  # a comment ]\n")
    parsed = parse_plan("\n".join(lines), N_WORKERS, MAX_STEPS)
    assert parsed == plan
    assert parse_plan(render_plan(parsed), N_WORKERS, MAX_STEPS) == parsed


@FAST
@given(st.text(max_size=300))
def test_arbitrary_text_only_raises_plan_error(text):
    parse_or_plan_error(text)
    parse_or_plan_error(text, allow_empty=True)


@FAST
@given(TOKEN_SOUP)
def test_token_soup_only_raises_plan_error(text):
    parse_or_plan_error(text)


@FAST
@given(plans(), st.data())
def test_truncated_plan_only_raises_plan_error(plan, data):
    text = "Reasoning first.\n```python\n" + render_plan(plan) + "\n```\n"
    cut = data.draw(st.integers(0, len(text)))
    result = parse_or_plan_error(text[:cut])
    if result is not None:
        # A truncated text can only parse if every list survived whole: then it
        # is the same plan (the cut fell after the last list's closing bracket).
        assert result == plan


@FAST
@given(plans(), st.data())
def test_noise_inserted_into_plan_only_raises_plan_error(plan, data):
    text = render_plan(plan)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(text)))
        noise = data.draw(st.one_of(st.text(max_size=8), TOKENS))
        text = text[:at] + noise + text[at:]
    parse_or_plan_error(text)


@FAST
@given(plans(), st.data())
def test_mutated_plan_only_raises_plan_error(plan, data):
    text = render_plan(plan)
    at = data.draw(st.integers(0, max(0, len(text) - 1)))
    width = data.draw(st.integers(0, 5))
    text = text[:at] + data.draw(TOKENS) + text[at + width :]
    parse_or_plan_error(text)


PROSE = st.text(max_size=200).filter(lambda s: not any(name in s for name in NAMES))


@FAST
@given(plans(), PROSE, PROSE, st.sampled_from(["", "```python\n", "```\n"]))
def test_plan_in_arbitrary_prose_parses_to_the_same_plan(plan, before, after, fence):
    closing = "```\n" if fence else ""
    text = before + "\n" + fence + render_plan(plan) + "\n" + closing + after
    assert parse_plan(text, N_WORKERS, MAX_STEPS) == plan


@FAST
@given(st.lists(plans(), min_size=2, max_size=3), PROSE)
def test_last_of_several_attempts_wins(attempts, prose):
    text = ("\n" + prose + "\n").join(render_plan(p) for p in attempts)
    assert parse_plan(text, N_WORKERS, MAX_STEPS) == attempts[-1]


@pytest.mark.parametrize("n_workers", [1, 2])
@FAST
@given(plan=plans(n_workers=2))
def test_ids_outside_the_roster_are_plan_errors(n_workers, plan):
    text = render_plan(plan)
    if all(s.model_id < n_workers for s in plan.steps):
        assert parse_plan(text, n_workers, MAX_STEPS) == plan
    else:
        with pytest.raises(PlanError, match="not a worker id"):
            parse_plan(text, n_workers, MAX_STEPS)
