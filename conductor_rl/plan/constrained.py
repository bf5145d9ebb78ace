"""Plan-format constrained decoding: the model may only write a well-formed plan.

A 135M Conductor almost never holds the three-list format by itself, so nothing
it does earns more than reward 0 and GRPO has no signal. With
`conductor.constrain_format`, every sampled token is checked against a small
state machine over the plan's shape; the model still chooses everything that
matters: how many steps, which worker does each, what each subtask says, and
what each step may read.

    model_id = [<id>, <id>, ...]            ids < n_workers, at most max_steps
    subtasks = ["<text>", "<text>", ...]     exactly one per id; no quote, backslash or newline inside
    access_list = [<a>, <a>, ...]            each [] or "all" (the paper's two choices)

Fixed text is forced token by token (from the tokenizer's own encoding of it),
so the decoded completion is exactly the plan text and `parse_plan` reads it.
The paper's Conductor reasons before its lists; constrained plans do not, and
the default (off) keeps the paper's behaviour.

With `allow_empty` the model may also close `model_id` at once and write the
empty plan (three `[]` lists, "stop: keep the current answer"), which is how a
recursive Conductor call declines to go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conductor_rl.config.sections import PLAN_START
from conductor_rl.plan.language import Plan

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# What follows PLAN_START in the empty plan (allow_empty): its "]" is the one choice.
EMPTY_TAIL = "]\nsubtasks = []\naccess_list = []\n"


class PlanFormatError(ValueError):
    """The tokenizer cannot express the plan format (the message says why)."""


@dataclass
class _Row:
    """Where one sequence is in the plan."""

    forced: list[int] = field(default_factory=list)  # token ids still to emit, in order
    mode: str = "ids"  # ids | text | access | done
    ids: int = 0  # ids written so far
    number: str = ""  # digits of the id being written
    steps: int = 0  # len(model_id), fixed once the list closes
    item: int = 0  # index of the subtask / access entry being written
    text_tokens: int = 0  # tokens in the current subtask
    then: str = ""  # mode to enter after the forced tokens


class PlanFormat:
    """Token tables for one tokenizer; `processor` makes a per-call logits processor."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_subtask_tokens: int = 96) -> None:
        import torch

        self.tokenizer = tokenizer
        self.max_subtask_tokens = max_subtask_tokens
        self.vocab_size = len(tokenizer)
        self.eos = tokenizer.eos_token_id
        texts = [tokenizer.decode([i]) for i in range(self.vocab_size)]
        special = set(tokenizer.all_special_ids)
        self.free_text = torch.tensor(
            [bool(t) and i not in special and not any(c in t for c in '"\\\n\r') for i, t in enumerate(texts)]
        )
        self.digit = {str(d): self._single(str(d)) for d in range(10)}
        self.quote = self._single('"')
        self.comma = self.encode(",")[0]
        self.close = self.encode("]")[0]
        self.access_choices = {"[]": self.encode("[]"), '"all"': self.encode('"all"')}
        if self.access_choices["[]"][0] == self.access_choices['"all"'][0]:
            raise PlanFormatError("the tokenizer starts '[]' and '\"all\"' with the same token")

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _single(self, char: str) -> int:
        ids = self.encode(char)
        if len(ids) != 1:
            raise PlanFormatError(f"the tokenizer has no single token for {char!r}")
        return ids[0]

    def processor(
        self,
        prompt_len: int,
        n_workers: int,
        max_steps: int,
        prefix: str = "",
        allow_empty: bool = False,
        ids: Sequence[int] | None = None,
    ) -> PlanLogitsProcessor:
        """A logits processor for one `generate` call. `prefix` is the response
        prefix already in the prompt; it must be the start of 'model_id = ['.
        `allow_empty`: the empty plan (no steps) may be written too. `ids`: the
        numbers the prompt listed (None: 0..n_workers-1)."""
        if not PLAN_START.startswith(prefix):
            raise PlanFormatError(
                f"with a constrained format the response prefix must be a start of {PLAN_START!r}, got {prefix!r}"
            )
        return PlanLogitsProcessor(
            self, prompt_len, n_workers, max_steps, self.encode(PLAN_START[len(prefix) :]), allow_empty, ids
        )


@dataclass(frozen=True)
class PlanConstraint:
    """Only well-formed plans may be sampled: the constraint `conductor_rl.generation.generate`
    takes. `format` holds the tokenizer's token tables, which are slow to build: keep one."""

    format: PlanFormat
    n_workers: int
    max_steps: int
    prefix: str = ""  # already at the end of the prompt (a start of 'model_id = [')
    allow_empty: bool = False  # the empty plan (no steps) may be sampled too
    ids: tuple[int, ...] | None = None  # the numbers the prompt listed (None: 0..n_workers-1)

    def processor(self, prompt_len: int) -> PlanLogitsProcessor:
        """The logits processor of one `generate` call whose prompts are `prompt_len` tokens wide."""
        return self.format.processor(
            prompt_len, self.n_workers, self.max_steps, self.prefix, self.allow_empty, self.ids
        )


class PlanLogitsProcessor:
    """transformers LogitsProcessor: masks every token the plan format forbids."""

    def __init__(
        self,
        fmt: PlanFormat,
        prompt_len: int,
        n_workers: int,
        max_steps: int,
        start: list[int],
        allow_empty: bool = False,
        ids: Sequence[int] | None = None,
    ) -> None:
        if n_workers < 1 or max_steps < 1:
            raise PlanFormatError("need at least one worker and one step")
        self.fmt, self.prompt_len, self.n_workers, self.max_steps = fmt, prompt_len, n_workers, max_steps
        self.ids = frozenset(range(n_workers) if ids is None else ids)
        self.start = start
        self.allow_empty = allow_empty
        self.rows: list[_Row] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if not self.rows:
            self.rows = [_Row(forced=list(self.start)) for _ in range(input_ids.shape[0])]
        elif input_ids.shape[1] > self.prompt_len:
            for row, token in zip(self.rows, input_ids[:, -1].tolist()):
                self._advance(row, token)
        mask = torch.zeros_like(scores, dtype=torch.bool)
        for r, row in enumerate(self.rows):
            allowed = self._allowed(row)
            if isinstance(allowed, list):
                mask[r, allowed] = True
            else:
                mask[r, : allowed.shape[0]] = allowed
        return scores.masked_fill(~mask, float("-inf"))

    # -- the state machine ------------------------------------------------
    def _allowed(self, row: _Row) -> Any:
        f = self.fmt
        if row.forced:
            return [row.forced[0]]
        if row.mode == "done":
            return [f.eos]
        if row.mode == "ids":
            allowed = [f.digit[d] for d in "0123456789" if self._id_ok(row.number + d)]
            if row.number and int(row.number) in self.ids:
                allowed += [f.close] + ([f.comma] if row.ids + 1 < self.max_steps else [])
            elif row.ids == 0 and self.allow_empty:
                allowed.append(f.close)  # "model_id = []": the empty plan
            return allowed
        if row.mode == "text":
            if row.text_tokens >= f.max_subtask_tokens:
                return [f.quote]
            mask = f.free_text.clone()
            if row.text_tokens > 0:
                mask[f.quote] = True
            return mask
        # access: step 0 can read nothing, so only [] there
        choices = ["[]"] if row.item == 0 else ["[]", '"all"']
        return [f.access_choices[c][0] for c in choices]

    def _id_ok(self, digits: str) -> bool:
        if len(digits) > 1 and digits[0] == "0":
            return False
        # A prefix of a listed id (1 on the way to 12) is fine too: the next digit must complete one.
        return any(str(i).startswith(digits) for i in self.ids)

    def _advance(self, row: _Row, token: int) -> None:
        f = self.fmt
        if row.forced:
            row.forced.pop(0)
            if not row.forced and row.then:
                row.mode, row.then = row.then, ""
            return
        if row.mode == "ids":
            digit = next((d for d, t in f.digit.items() if t == token), None)
            if digit is not None:
                row.number += digit
                return
            if not row.number:  # "]" before any id: the empty plan (only allowed with allow_empty)
                # The "]" is written; force the rest from the tokenizer's own encoding of it,
                # as for a non-empty plan, so the decoded text is exactly the empty plan.
                self._force(row, EMPTY_TAIL[1:], "done")
                return
            row.ids += 1
            row.number = ""
            if token == f.comma:
                row.forced = f.encode(" ")
            else:  # the list closed
                row.steps = row.ids
                self._force(row, ']\nsubtasks = ["'[1:], "text")
        elif row.mode == "text":
            if token != f.quote:
                row.text_tokens += 1
                return
            row.item += 1
            row.text_tokens = 0
            if row.item < row.steps:
                self._force(row, ', "', "text")
            else:
                row.item = 0
                self._force(row, "]\naccess_list = [", "access")
        elif row.mode == "access":
            choice = "[]" if token == f.access_choices["[]"][0] else '"all"'
            row.forced = list(f.access_choices[choice][1:])
            row.item += 1
            tail = ", " if row.item < row.steps else "]\n"
            row.forced += f.encode(tail)
            row.then = "access" if row.item < row.steps else "done"
            if not row.forced:
                row.mode, row.then = row.then, ""

    def _force(self, row: _Row, text: str, then: str) -> None:
        row.forced = self.fmt.encode(text)
        row.then = then
        if not row.forced:
            row.mode, row.then = then, ""


def encode_plan(fmt: PlanFormat, plan: Plan, prefix: str = "") -> list[int]:
    """The token ids a constrained sampler writes for `plan`: the path through
    `PlanLogitsProcessor` (forced text from the tokenizer's encoding of each piece,
    ids digit by digit, each subtask as the tokenizer encodes it alone), so a
    demonstration (conductor_rl/plan/demonstrations.py) teaches tokens the sampler
    can choose, the empty plan included (as under `allow_empty`). `prefix`: the response prefix
    already in the prompt. Raises PlanFormatError for a plan the format cannot hold."""
    if not PLAN_START.startswith(prefix):
        raise PlanFormatError(f"prefix {prefix!r} must be a start of {PLAN_START!r}")
    steps = plan.steps
    ids = fmt.encode(PLAN_START[len(prefix) :])
    if not steps:  # the empty plan (a recursive call's "keep the answer"): its "]", then forced text
        return [*ids, fmt.close, *fmt.encode(EMPTY_TAIL[1:])]
    for i, step in enumerate(steps):
        ids += [fmt.digit[d] for d in str(step.model_id)]
        ids += [fmt.comma, *fmt.encode(" ")] if i + 1 < len(steps) else [fmt.close]
    ids += fmt.encode('\nsubtasks = ["')
    for i, step in enumerate(steps):
        text = fmt.encode(step.subtask)
        if not text or len(text) > fmt.max_subtask_tokens or not all(bool(fmt.free_text[t]) for t in text):
            raise PlanFormatError(
                f"subtask {i} must be 1 to {fmt.max_subtask_tokens} tokens without a quote, backslash or newline"
            )
        ids += [*text, fmt.quote]
        ids += fmt.encode(', "') if i + 1 < len(steps) else fmt.encode("]\naccess_list = [")
    for i, step in enumerate(steps):
        if step.access not in ([], "all") or (i == 0 and step.access == "all"):
            raise PlanFormatError(f'step {i}: the format\'s access is [] or "all" (and [] for the first step)')
        ids += fmt.access_choices["[]" if step.access == [] else '"all"']
        ids += fmt.encode(", ") if i + 1 < len(steps) else fmt.encode("]\n")
    return ids


def plan_regex(
    n_workers: int,
    max_steps: int,
    max_subtask_chars: int = 400,
    prefix: str = "",
    allow_empty: bool = False,
    ids: Sequence[int] | None = None,
) -> str:
    """The same plan format as a regular expression, for engines with
    regex-guided decoding (vLLM's structured outputs). One alternative per
    plan length keeps the three lists equally long. `prefix`: text already in
    the prompt (a start of 'model_id = ['), which the completion continues.
    `allow_empty`: one more alternative, the empty plan. `ids`: the numbers the
    prompt listed (None: 0..n_workers-1)."""
    if not PLAN_START.startswith(prefix):
        raise PlanFormatError(f"prefix {prefix!r} must be a start of {PLAN_START!r}")
    listed = tuple(range(n_workers)) if ids is None else tuple(ids)
    if not 1 <= n_workers <= 10 or len(listed) != n_workers or not all(0 <= i <= 9 for i in listed):
        raise PlanFormatError(f"plan_regex supports 1 to 10 workers with one-digit ids, got {list(listed)}")
    worker = "[" + "".join(str(i) for i in sorted(listed)) + "]"
    text = '"[^"\\\\\\n]{1,%d}"' % max_subtask_chars
    access = '(\\[\\]|"all")'

    def plan(k: int) -> str:
        ids = worker + (", " + worker) * (k - 1)
        subtasks = text + (", " + text) * (k - 1)
        accesses = "\\[\\]" + (", " + access) * (k - 1)
        return f"{ids}\\]\\nsubtasks = \\[{subtasks}\\]\\naccess_list = \\[{accesses}\\]\\n"

    plans = [plan(k) for k in range(1, max_steps + 1)]
    if allow_empty:
        plans.append(EMPTY_TAIL.replace("[", "\\[").replace("]", "\\]").replace("\n", "\\n"))
    return PLAN_START[len(prefix) :].replace("[", "\\[") + "(" + "|".join(plans) + ")"


#: The Conductor's choices in a constrained plan, by what they decide (`choice_segments`): which
#: workers and how many steps (the ids, their separators and the closing bracket), what each step
#: is asked (its subtask's text and closing quote), and what each later step reads (its access).
SEGMENTS = ("workers", "subtasks", "access")


def choice_segments(
    tokenizer: PreTrainedTokenizerBase, completion_ids: list[int], prefix: str = ""
) -> list[str | None]:
    """Per completion token, which of `SEGMENTS` it carries a choice of, or None for the format's own
    text (see `choice_mask`); a token that straddles two takes the first. A completion that is not a
    whole plan is "workers" throughout: nothing in it can be told apart."""
    text = tokenizer.decode(completion_ids, skip_special_tokens=True)
    chars = _choice_chars(prefix + text)
    if chars is None:
        return ["workers"] * len(completion_ids)
    labels: list[str | None] = []
    start = len(prefix)
    for k in range(len(completion_ids)):
        end = len(prefix) + len(tokenizer.decode(completion_ids[: k + 1], skip_special_tokens=True))
        labels.append(next((c for c in chars[start:end] if c is not None), None))
        start = max(start, end)
    return labels


def choice_mask(
    tokenizer: PreTrainedTokenizerBase,
    completion_ids: list[int],
    prefix: str = "",
    subtasks: bool = True,
    workers: bool = True,
) -> list[int]:
    """1 for each completion token that carries one of the Conductor's choices
    under the constrained format, 0 for the format's own text.

    Choices: the worker ids and the list's separators and closing bracket (how
    many steps), each subtask's text and closing quote (what, and how long), and
    each access entry after the first; in the empty plan (`allow_empty`), its "]".
    The rest ("]\\nsubtasks = [\\"", ", ", "access_list = [", the first step's
    "[]", the end of text) is dictated by the format: under the constrained
    policy its probability is 1 and its gradient 0, so the GRPO loss leaves it
    out rather than spend the update making the model better at text it cannot
    get wrong. A token that straddles format text and a choice counts as a
    choice. A completion that is not a whole plan (cut off by the token limit)
    keeps every token.

    `subtasks=False` leaves the subtask text out too (`train.subtask_text_in_loss`):
    where the reward cannot depend on a subtask's wording (simulated workers), the
    policy gradient of those tokens has expectation 0, and leaving them out is
    variance reduction with no bias. `workers=False` leaves the workers and step count out
    (`train.warm_start.workers_in_loss`: a demonstration draws them whatever the question)."""
    left_out = {None} | ({"subtasks"} if not subtasks else set()) | ({"workers"} if not workers else set())
    return [int(label not in left_out) for label in choice_segments(tokenizer, completion_ids, prefix)]


def choice_weights(labels: Sequence[str | None], subtasks: bool = True) -> list[float]:
    """Loss weights per token (`train.choice_weighting: segment`): each segment a plan has (of
    `SEGMENTS`; `subtasks=False` drops that one) gets an equal share of the plan's choice tokens'
    total weight, spread evenly over its tokens, so a plan weighs as much as under 0/1 masks but
    its one token that picks a worker weighs as much as its subtasks' dozens together."""
    kept = [label if label is not None and (subtasks or label != "subtasks") else None for label in labels]
    counts = {segment: kept.count(segment) for segment in SEGMENTS if segment in kept}
    total = sum(counts.values())
    return [0.0 if label is None else total / (len(counts) * counts[label]) for label in kept]


def _choice_chars(plan: str) -> list[str | None] | None:
    """Per character of a constrained plan's text: the segment whose choice it carries (None: the
    format's text). None if the text is not a whole plan."""
    chosen: list[str | None] = [None] * len(plan)

    def mark(a: int, b: int, segment: str) -> None:
        chosen[a:b] = [segment] * (b - a)

    if not plan.startswith(PLAN_START):
        return None
    at = len(PLAN_START)
    if plan.startswith(EMPTY_TAIL, at):  # the empty plan: its "]" is the choice (no steps)
        chosen[at] = "workers"
        return chosen
    close = plan.find("]", at)
    if close < 0:
        return None
    for i in range(at, close + 1):  # ids, separators and the closing bracket (", " has a forced space)
        chosen[i] = "workers" if plan[i] != " " else None
    steps = len(plan[at:close].split(","))
    at = plan.find('subtasks = ["', close)
    if at < 0:
        return None
    at += len("subtasks = [")
    for _ in range(steps):
        if plan[at : at + 1] != '"':
            return None
        end = plan.find('"', at + 1)
        if end < 0:
            return None
        mark(at + 1, end + 1, "subtasks")  # the text and its closing quote
        at = end + 1
        at += 2 if plan.startswith(", ", at) else 0
    at = plan.find("access_list = [", at)
    if at < 0:
        return None
    at += len("access_list = [")
    for step in range(steps):
        entry = "[]" if plan.startswith("[]", at) else '"all"' if plan.startswith('"all"', at) else None
        if entry is None:
            return None
        if step > 0:
            mark(at, at + len(entry), "access")
        at += len(entry)
        at += 2 if plan.startswith(", ", at) else 0
    return chosen
