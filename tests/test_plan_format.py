"""Constrained decoding: whatever the model's weights, a sampled plan parses."""

import pytest
import torch

from conductor_rl.config import ConductorConfig, ConfigError, load_config
from conductor_rl.plan import parse_plan
from conductor_rl.plan.constrained import PlanFormat, PlanFormatError
from conductor_rl.policy.conductor import Conductor

pytestmark = pytest.mark.light  # starts no Ray, vLLM or learner: runs beside the heavy tests (conftest.py)


@pytest.mark.parametrize(
    "n_workers, max_steps, prefix", [(3, 5, "model_id = ["), (1, 1, ""), (2, 3, "model_"), (12, 4, "")]
)
def test_random_model_always_writes_a_parsable_plan(tiny_qwen2, n_workers, max_steps, prefix):
    model, tokenizer = tiny_qwen2
    # Short subtasks: what is checked is the plan's structure; most of a plan's tokens are its subtasks' text.
    config = ConductorConfig(
        model="tiny-qwen2",
        temperature=1.0,
        max_new_tokens=400,
        max_steps=max_steps,
        constrain_format=True,
        max_subtask_tokens=4,
        response_prefix=prefix,
        n_examples=0,
    )
    conductor = Conductor(config, model, tokenizer)
    completions = conductor.write_plans("What is 6 * 7?", n_workers=n_workers, n=8, seed=3)
    step_counts = set()
    for c in completions:
        plan = parse_plan(c.text, n_workers=n_workers, max_steps=max_steps)
        assert not c.truncated
        assert all(0 <= s.model_id < n_workers for s in plan.steps)
        assert plan.steps[0].access == []  # step 0 can read nothing
        assert all(s.access in ([], "all") for s in plan.steps)
        step_counts.add(len(plan.steps))
    if max_steps > 1:
        assert len(step_counts) > 1  # the model, not the constraint, chooses the plan's length


def test_subtasks_are_cut_at_the_configured_length(tiny_qwen2):
    model, tokenizer = tiny_qwen2
    config = ConductorConfig(
        model="tiny-qwen2", max_new_tokens=400, constrain_format=True, max_subtask_tokens=5, n_examples=0
    )
    for c in Conductor(config, model, tokenizer).write_plans("q", n_workers=2, n=4, seed=0):
        plan = parse_plan(c.text, 2)
        pieces = [tokenizer.decode([t]) for t in c.token_ids]
        # Subtask text is the runs of quote-free tokens between the first quote and access_list.
        start = next(i for i, p in enumerate(pieces) if '"' in p)
        end = next(i for i, p in enumerate(pieces) if "access" in p)
        runs, run, inside = [], 0, False
        for piece in pieces[start:end]:
            if '"' in piece:  # alternately opens and closes a subtask string
                if inside:
                    runs.append(run)
                inside, run = not inside, 0
            elif inside:
                run += 1
        assert len(runs) == len(plan.steps) and all(1 <= r <= 5 for r in runs)


def test_greedy_constrained_is_deterministic_and_temperature_changes_samples(tiny_qwen2):
    model, tokenizer = tiny_qwen2
    config = ConductorConfig(
        model="tiny-qwen2", max_new_tokens=300, constrain_format=True, max_subtask_tokens=8, n_examples=0
    )
    conductor = Conductor(config, model, tokenizer)
    greedy = [conductor.write_plans("q", 3, n=1, seed=s, temperature=0)[0].text for s in (0, 1)]
    assert greedy[0] == greedy[1]
    sampled = {c.text for c in conductor.write_plans("q", 3, n=6, seed=0, temperature=1.0)}
    assert len(sampled) > 1


def test_mask_allows_only_valid_ids_then_forces_the_next_list(tiny_qwen2):
    _, tokenizer = tiny_qwen2
    fmt = PlanFormat(tokenizer, max_subtask_tokens=4)
    proc = fmt.processor(prompt_len=1, n_workers=2, max_steps=2, prefix="model_id = [")
    ids = torch.zeros((1, 1), dtype=torch.long)
    scores = proc(ids, torch.zeros((1, len(tokenizer))))
    allowed = set(torch.nonzero(scores[0] > float("-inf")).flatten().tolist())
    assert allowed == {fmt.digit["0"], fmt.digit["1"]}  # ids 0 and 1, nothing else
    ids = torch.tensor([[0, fmt.digit["1"]]])
    scores = proc(ids, torch.zeros((1, len(tokenizer))))
    allowed = set(torch.nonzero(scores[0] > float("-inf")).flatten().tolist())
    assert allowed == {fmt.close, fmt.comma}  # "11" is no id of 2 workers


def test_prefix_that_is_not_the_plan_start_is_rejected(tiny_qwen2):
    _, tokenizer = tiny_qwen2
    with pytest.raises(PlanFormatError, match="response prefix"):
        PlanFormat(tokenizer).processor(1, 2, 2, prefix="Let me think")


def test_config_rejects_conflicting_prefix():
    with pytest.raises(ConfigError, match="conductor: .*conflicts with constrain_format"):
        load_config(None, ["conductor.constrain_format=true", "conductor.response_prefix=Let me think"])


def test_smollm2_constrained_plans_parse(smollm2):
    model, tokenizer = smollm2
    config = ConductorConfig(
        model="smollm2-135m",
        max_new_tokens=200,
        constrain_format=True,
        max_subtask_tokens=8,
        response_prefix="model_id = [",
        n_examples=1,
    )
    completions = Conductor(config, model, tokenizer).write_plans("What is 17 * 23?", n_workers=3, n=2, seed=0)
    for c in completions:
        assert parse_plan(c.text, 3).steps


def test_plan_regex_accepts_exactly_well_formed_plans():
    import re

    from conductor_rl.plan.constrained import plan_regex

    pattern = re.compile(plan_regex(n_workers=3, max_steps=2, max_subtask_chars=10))
    good = 'model_id = [2, 0]\nsubtasks = ["solve it", "check"]\naccess_list = [[], "all"]\n'
    assert pattern.fullmatch(good) and parse_plan(good, 3, 2).visible(1) == [0]
    for bad in [
        good.replace("[2, 0]", "[3, 0]"),  # id out of range
        good.replace('"solve it", ', ""),  # lengths differ
        good.replace('"solve it"', '"far too long a subtask"'),  # over the cap
        good.replace("[[], ", '["all", '),  # step 0 reads nothing
        'model_id = [0, 1, 2]\nsubtasks = ["a", "b", "c"]\naccess_list = [[], [], []]\n',
    ]:  # > max_steps
        assert not pattern.fullmatch(bad), bad
    with pytest.raises(PlanFormatError, match="1 to 10 workers"):
        plan_regex(11, 2)


def test_choice_mask_keeps_the_conductors_choices_and_drops_the_formats_text(smollm2):
    from conductor_rl.plan.constrained import choice_mask

    _, tokenizer = smollm2
    completion = '0, 2]\nsubtasks = ["Solve it", "Give the answer"]\naccess_list = [[], "all"]\n'
    ids = tokenizer.encode(completion, add_special_tokens=False) + [tokenizer.eos_token_id]
    mask = choice_mask(tokenizer, ids, "model_id = [")
    chosen = "".join(tokenizer.decode([i]) for i, m in zip(ids, mask) if m)
    dropped = "".join(tokenizer.decode([i]) for i, m in zip(ids, mask) if not m)
    for text in ("0", "2]", "Solve it", "Give the answer", "all"):
        assert text in chosen, (text, chosen)
    for text in ("subtasks", "access_list", "<|im_end|>"):
        assert text in dropped and text not in chosen, (text, dropped)
    # a plan cut off by the token limit is not the format's: every token stays in the loss
    assert choice_mask(tokenizer, ids[:12], "model_id = [") == [1] * 12


def test_choice_mask_covers_every_sampled_worker_id(tiny_qwen2):
    from conductor_rl.plan.constrained import choice_mask

    model, tokenizer = tiny_qwen2
    fmt = PlanFormat(tokenizer, max_subtask_tokens=5)
    prompt = tokenizer("Plan:", return_tensors="pt").input_ids
    torch.manual_seed(0)
    for _ in range(4):
        processors = fmt.processor(prompt.shape[1], 3, 3, "model_id = [")
        out = model.generate(
            prompt,
            do_sample=True,
            max_new_tokens=80,
            logits_processor=[processors],
            pad_token_id=tokenizer.eos_token_id,
        )
        ids = out[0, prompt.shape[1] :].tolist()
        plan = parse_plan("model_id = [" + tokenizer.decode(ids, skip_special_tokens=True), 3, 3)
        mask = choice_mask(tokenizer, ids, "model_id = [")
        assert 0 < sum(mask) < len(ids)
        digits = [i for i, t in enumerate(ids) if tokenizer.decode([t]).strip().isdigit()][: len(plan.steps)]
        assert all(mask[i] for i in digits)


EMPTY_PLAN = "model_id = []\nsubtasks = []\naccess_list = []\n"


@pytest.mark.parametrize("prefix", ["", "model_id = ["])
def test_plan_regex_matches_the_empty_plan_only_when_allowed(prefix):
    import re

    from conductor_rl.plan.constrained import plan_regex

    strict = re.compile(plan_regex(n_workers=3, max_steps=2, max_subtask_chars=10, prefix=prefix))
    loose = re.compile(plan_regex(n_workers=3, max_steps=2, max_subtask_chars=10, prefix=prefix, allow_empty=True))
    assert loose.fullmatch(EMPTY_PLAN[len(prefix) :]) and not strict.fullmatch(EMPTY_PLAN[len(prefix) :])
    good = 'model_id = [2, 0]\nsubtasks = ["solve it", "check"]\naccess_list = [[], "all"]\n'
    assert strict.fullmatch(good[len(prefix) :]) and loose.fullmatch(good[len(prefix) :])
    for bad in [
        good.replace("[2, 0]", "[3, 0]"),
        good.replace('"solve it", ', ""),
        EMPTY_PLAN.rstrip("\n"),  # the empty plan cut short
        EMPTY_PLAN.replace("subtasks = []", 'subtasks = ["x"]'),  # lists of different lengths
        EMPTY_PLAN.replace("access_list = []", "access_list = [[]]"),
        'model_id = [0, 1, 2]\nsubtasks = ["a", "b", "c"]\naccess_list = [[], [], []]\n',
    ]:
        assert not loose.fullmatch(bad[len(prefix) :]) and not strict.fullmatch(bad[len(prefix) :]), bad


def _favour_close(fmt, proc, prompt_len, vocab, limit=80):
    """Greedy through `proc` with the "]" token scored highest: the completion's token ids,
    and the tokens the processor allowed at the first free (not forced) step."""
    ids = torch.zeros((1, prompt_len), dtype=torch.long)
    first_free = None
    for _ in range(limit):
        scores = torch.zeros((1, vocab))
        scores[0, fmt.close] = 10.0
        out = proc(ids, scores)
        allowed = set(torch.nonzero(out[0] > float("-inf")).flatten().tolist())
        if first_free is None and len(allowed) > 1:
            first_free = allowed
        token = int(out[0].argmax())
        if token == fmt.eos:
            return ids[0, prompt_len:].tolist(), first_free
        ids = torch.cat([ids, torch.tensor([[token]])], dim=-1)
    raise AssertionError("no end of sequence")


@pytest.mark.parametrize("model", ["tiny_qwen2", "smollm2"])
@pytest.mark.parametrize("prefix", ["", "model_id = ["])
def test_allow_empty_processor_can_write_exactly_the_empty_plan(request, model, prefix):
    from conductor_rl.plan import Plan
    from conductor_rl.plan.constrained import choice_mask

    _, tokenizer = request.getfixturevalue(model)
    fmt = PlanFormat(tokenizer, max_subtask_tokens=3)
    digits = {fmt.digit[d] for d in "012"}

    ids, first = _favour_close(fmt, fmt.processor(1, 3, 2, prefix, allow_empty=True), 1, len(tokenizer))
    assert first == digits | {fmt.close}
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert prefix + text == EMPTY_PLAN
    assert parse_plan(prefix + text, 3, 2, allow_empty=True) == Plan(())
    # the "]" is the one choice: the rest was forced
    assert choice_mask(tokenizer, ids + [fmt.eos], prefix) == [1 if i == fmt.close else 0 for i in ids] + [0]

    # without allow_empty "]" cannot come first: the same scores give a plan with steps
    ids, first = _favour_close(fmt, fmt.processor(1, 3, 2, prefix), 1, len(tokenizer))
    assert first == digits
    assert parse_plan(prefix + tokenizer.decode(ids, skip_special_tokens=True), 3, 2).steps


def test_allow_empty_does_not_let_a_list_close_after_a_separator(tiny_qwen2):
    _, tokenizer = tiny_qwen2
    fmt = PlanFormat(tokenizer)
    proc = fmt.processor(prompt_len=1, n_workers=2, max_steps=3, prefix="model_id = [", allow_empty=True)
    ids = torch.zeros((1, 1), dtype=torch.long)
    proc(ids, torch.zeros((1, len(tokenizer))))
    for token in [fmt.digit["1"], fmt.comma] + fmt.encode(" "):  # "1, " written: an id must follow
        ids = torch.cat([ids, torch.tensor([[token]])], dim=-1)
        scores = proc(ids, torch.zeros((1, len(tokenizer))))
    allowed = set(torch.nonzero(scores[0] > float("-inf")).flatten().tolist())
    assert allowed == {fmt.digit["0"], fmt.digit["1"]}


@pytest.mark.parametrize("model", ["tiny_qwen2", "smollm2"])
@pytest.mark.parametrize("prefix", ["", "model_id = ["])
def test_choice_mask_on_the_empty_plan_marks_only_its_closing_bracket(request, model, prefix):
    from conductor_rl.plan.constrained import PLAN_START, choice_mask

    _, tokenizer = request.getfixturevalue(model)
    ids = tokenizer.encode(EMPTY_PLAN[len(prefix) :], add_special_tokens=False) + [tokenizer.eos_token_id]
    mask = choice_mask(tokenizer, ids, prefix)
    # the tokenizer's own encoding may join "]" to its neighbours (" []\n"): that one token is the choice
    spans, end = [], len(prefix)
    for k in range(len(ids)):
        start, end = end, len(prefix) + len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True))
        spans.append((start, end))
    bracket = len(PLAN_START)
    assert mask == [int(a <= bracket < b) for a, b in spans]
    assert sum(mask) == 1 and "]" in tokenizer.decode([ids[mask.index(1)]])
    # an empty plan cut off by the token limit is not a whole plan: every token stays
    assert choice_mask(tokenizer, ids[:-4], prefix) == [1] * (len(ids) - 4)


def test_a_subset_listed_under_pool_numbers_is_all_a_sampled_plan_may_name(tiny_qwen2):
    import re

    from conductor_rl.plan.constrained import plan_regex
    from conductor_rl.plan.roster import Roster

    model, tokenizer = tiny_qwen2
    config = ConductorConfig(
        model="tiny-qwen2", max_new_tokens=200, max_steps=3, constrain_format=True, max_subtask_tokens=3, n_examples=0
    )
    roster = Roster((1, 3, 7), ids=(1, 3, 12))  # a two-digit number too: the mask completes it
    named = set()
    for c in Conductor(config, model, tokenizer).write_plans("q", roster, n=12, seed=0, temperature=1.0):
        plan = parse_plan(c.text, 3, 3, ids=roster.model_ids)  # raises on a number outside the roster
        named |= {roster.model_ids[s.model_id] for s in plan.steps}
    assert named == {1, 3, 12}, named
    # vLLM's regex (one-digit numbers) admits exactly the listed ones.
    regex = plan_regex(2, 1, 20, "model_id = [", ids=(1, 3))
    plan = '{}]\nsubtasks = ["x"]\naccess_list = [[]]\n'
    assert re.fullmatch(regex, plan.format(3)) and re.fullmatch(regex, plan.format(1))
    assert not re.fullmatch(regex, plan.format(0)) and not re.fullmatch(regex, plan.format(2))


def test_segment_weights_give_each_kind_of_choice_an_equal_share_of_the_plans_weight():
    from conductor_rl.plan.constrained import choice_weights

    labels = ["workers", "workers", None, "subtasks", "subtasks", "subtasks", "subtasks", None, "access", None]
    weights = choice_weights(labels)
    assert sum(weights) == pytest.approx(7)  # as many as the 0/1 mask's choice tokens
    assert weights[0] + weights[1] == pytest.approx(sum(weights[3:7])) == pytest.approx(weights[8])
    assert [weights[i] for i in (2, 7, 9)] == [0.0, 0.0, 0.0]
    # without the subtask text in the loss, the other two kinds share the weight
    no_text = choice_weights(labels, subtasks=False)
    assert no_text[3:7] == [0.0] * 4 and no_text[0] + no_text[1] == pytest.approx(no_text[8]) == pytest.approx(1.5)
    assert choice_weights(["workers"] * 3) == [1.0, 1.0, 1.0]  # a cut-off plan: every token alike


def test_choice_segments_name_what_each_token_chooses(smollm2):
    from conductor_rl.plan.constrained import choice_mask, choice_segments

    _, tokenizer = smollm2
    completion = '0, 2]\nsubtasks = ["Solve it", "Check the answer"]\naccess_list = [[], "all"]\n'
    ids = tokenizer.encode(completion, add_special_tokens=False) + [tokenizer.eos_token_id]
    labels = choice_segments(tokenizer, ids, "model_id = [")
    by_kind = {
        k: "".join(tokenizer.decode([i]) for i, x in zip(ids, labels) if x == k)
        for k in ("workers", "subtasks", "access")
    }
    assert by_kind["workers"].replace(" ", "") == "0,2]"
    assert "Solve it" in by_kind["subtasks"] and "Check the answer" in by_kind["subtasks"]
    assert "all" in by_kind["access"] and "[]" not in by_kind["access"]  # the first step's [] is forced
    assert choice_mask(tokenizer, ids, "model_id = [") == [int(x is not None) for x in labels]
    assert choice_mask(tokenizer, ids, "model_id = [", subtasks=False) == [
        int(x is not None and x != "subtasks") for x in labels
    ]
