"""Prompts: what the Conductor is asked, and what each worker is asked.

The Conductor sees workers only by ordinal id ("Model 0", "Model 1", ...; paper
§3.1; a subset of the pool lists each worker under its same number, plan/roster.py), the output format, the step limit and worked examples. The examples come
from tasks outside the training domains (medical reasoning, a hard proof-style
math question, Countdown, fact-checking), which the paper found to work better
than in-distribution ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from conductor_rl.config import ConfigError
from conductor_rl.plan.roster import Roster, as_roster, roster_for
from conductor_rl.plan.shape import PlanShape

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from conductor_rl.config import Config
    from conductor_rl.data import Question

CONDUCTOR_SYSTEM = """You are the Conductor. You coordinate a team of language models to answer a question.
You do not answer the question yourself: you write a short workflow of at most {max_steps} steps.
Each step gives one model a subtask in natural language and decides which earlier steps' outputs that model may read.
The available models are {roster}. They differ in strengths; {known}.{seat}

You may think first. Then write exactly three Python lists of equal length:
model_id = [...]      # which model does each step ({ids})
subtasks = [...]      # the instruction for each step (strings); include every detail the model needs
access_list = [...]   # for each step: [] (sees no earlier step), "all" (sees every earlier step), or a list of earlier step numbers such as [0, 2]
The answer of the last step is the final answer, so the last subtask must ask for the final answer in the form the question requires."""

# Worked examples (ours), deliberately outside the training domains. Small models
# copy the last example's shape most, so it is a multi-step plan with explicit access.
EXAMPLES: tuple[tuple[str, int, str], ...] = (
    (
        "Is this claim true or false: 'The Great Wall of China is visible to the naked eye from the Moon.'",
        2,
        """A simple factual check: one model is enough.
model_id = [1]
subtasks = ["Is it true or false that the Great Wall of China is visible to the naked eye from the Moon? Answer True or False with a one-sentence reason."]
access_list = [[]]""",
    ),
    (
        "A 58-year-old man has crushing chest pain for 40 minutes, ST elevation in leads II, III and aVF, "
        "and a blood pressure of 82/50 mmHg. Which vessel is most likely occluded, and what should be avoided?",
        3,
        """This needs a diagnosis and then a careful check of the treatment caveat, so two experts then a reviewer.
model_id = [1, 0, 2]
subtasks = ["Interpret this ECG and presentation: chest pain for 40 minutes, ST elevation in II, III and aVF, blood pressure 82/50 mmHg. Which coronary artery is most likely occluded? Explain briefly.",
            "A patient has an inferior STEMI with hypotension (82/50 mmHg). Which common drug should be avoided and why? Consider right ventricular involvement.",
            "Combine the two analyses above into one final answer: the occluded vessel and the drug to avoid, with a one-sentence justification. Correct any mistake you find."]
access_list = [[], [], "all"]""",
    ),
    (
        "Countdown: reach 952 using the numbers 25, 50, 75, 100, 3, 6, each at most once, with + - * /.",
        4,
        """A search problem: let two models search independently, then one checks both and picks a valid expression.
model_id = [3, 2, 1]
subtasks = ["Countdown: find an arithmetic expression equal to 952 using 25, 50, 75, 100, 3, 6, each at most once, with + - * /. Show the expression.",
            "Countdown: find an arithmetic expression equal to 952 using 25, 50, 75, 100, 3, 6, each at most once, with + - * /. Try starting from 100 * 9 or 75 * 13.",
            "Verify the candidate expressions above step by step: each number used at most once, only + - * /, result exactly 952. Output one valid expression as the final answer."]
access_list = [[], [], "all"]""",
    ),
    (
        "Let f(x) = x^3 - 3x + 1. How many real roots does f(f(x)) = 0 have?",
        2,
        """A composition problem: one model finds the roots of f, another counts preimages, then the first verifies.
model_id = [0, 1, 0]
subtasks = ["Find the number of real roots of f(x) = x^3 - 3x + 1 and give approximate values of each root.",
            "Using the roots r1, r2, r3 of f found before, count for each r the real solutions of x^3 - 3x + 1 = r (look at the local maximum 3 and minimum -1 of f). Sum the counts.",
            "Check the counting argument above for f(f(x)) = 0 with f(x) = x^3 - 3x + 1 and state the final number of real roots as \\boxed{n}."]
access_list = [[], [0], "all"]""",
    ),
)


def roster_text(listed: int | Roster) -> str:
    """ "Model 0, Model 2", or with descriptions "Model 0 (a maths specialist), Model 1 (...)"."""
    roster = as_roster(listed)
    names = [f"Model {i}" for i in roster.model_ids]
    if roster.descriptions is not None:
        names = [f"{name} ({text})" for name, text in zip(names, roster.descriptions)]
    return ", ".join(names)


def ids_text(listed: int | Roster) -> str:
    """What a plan's model_id may hold: "integers from 0 to 2", or "one of 0, 2, 5" for a subset."""
    ids = as_roster(listed).model_ids
    if ids == tuple(range(len(ids))):
        return f"integers from 0 to {len(ids) - 1}"
    return "one of " + ", ".join(map(str, ids))


def conductor_messages(
    question: str,
    listed: int | Roster,
    max_steps: int = 5,
    n_examples: int = 4,
    answer_format: str | None = None,
) -> list[dict[str, str]]:
    """The chat messages that ask the Conductor for a plan; `listed`: the roster its prompt lists
    (a number n: Model 0..n-1). `answer_format`: the instruction the plan's last step will be
    given (`conductor.show_answer_format`), shown after the question; None: not shown."""
    roster = as_roster(listed)
    known = "you only know them by number" if roster.descriptions is None else "you know them by a short description"
    seat = ""
    if roster.seat is not None:
        seat = (
            f"\nModel {roster.model_ids[roster.seat]} is yourself: a step given to it shows you the answer it reads, "
            "and you may write a new workflow to improve it or keep it."
        )
    system = CONDUCTOR_SYSTEM.format(
        max_steps=max_steps, roster=roster_text(roster), known=known, seat=seat, ids=ids_text(roster)
    )
    shots = []
    for i, (example_question, pool, plan) in enumerate(EXAMPLES[:n_examples], 1):
        shots.append(
            f"Example {i} (a team of {pool} models: {roster_text(pool)})\nQuestion: {example_question}\n{plan}"
        )
    user = ""
    if shots:
        user += "Here are worked examples from other tasks.\n\n" + "\n\n".join(shots) + "\n\n"
    user += f"Now your task (a team of {len(roster)} models: {roster_text(roster)}).\nQuestion: {question}"
    if answer_format:
        user += f"\nIts last step will be told: {answer_format}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


RECURSION_NOTE = """

You are called again on a question a workflow has already answered: you see the workflow that ran and its answer.
If the answer may be wrong or incomplete, write a new workflow to improve it; every step of it is shown the answer so far.
If the answer is right, keep it: write three empty lists.
model_id = []
subtasks = []
access_list = []"""


def recursive_messages(
    question: str,
    listed: int | Roster,
    parent: str,
    answer_so_far: str,
    max_steps: int = 5,
    n_examples: int = 4,
    answer_format: str | None = None,
) -> list[dict[str, str]]:
    """The chat messages of a recursive call (paper §3.2): the Conductor's own prompt, told
    that it may stop, then the workflow that ran (`parent`, the calling Conductor's
    completion) and the answer it reached."""
    system, user = conductor_messages(question, listed, max_steps, n_examples, answer_format)
    shown = (
        answer_so_far
        if len(answer_so_far) <= MAX_SHOWN_ANSWER_CHARS
        else "[...] " + answer_so_far[-MAX_SHOWN_ANSWER_CHARS:]
    )
    return [
        {"role": "system", "content": system["content"] + RECURSION_NOTE},
        {
            "role": "user",
            "content": f"{user['content']}\n\nThe workflow that ran:\n{parent.strip()}\n\n"
            f"Its answer:\n{shown or '(no answer)'}",
        },
    ]


# The answer a recursive call is shown is cut from the front past this: the prompt must fit the generator.
MAX_SHOWN_ANSWER_CHARS = 2_000

WORKER_SYSTEM = "You are a capable assistant working on one step of a larger task. Be correct and concise."


def worker_messages(
    subtask: str,
    context: Sequence[tuple[int, str, str]] = (),
    question: str | None = None,
    max_context_chars: int = 32_000,
    answer_so_far: str | None = None,
    answer_format: str | None = None,
) -> list[dict[str, str]]:
    """The chat messages for one step: the subtask plus the earlier (index,
    subtask, answer) triples its access list selects. Long answers are cut
    from the front so the most recent conclusions survive. `answer_so_far`: in a
    recursive call's plan, the answer that plan is to improve (every step sees it).
    `answer_format`: the grader's answer instruction, after the subtask (a plan's last step)."""
    parts = []
    if question is not None:
        parts.append(f"Original question:\n{question}")
    if answer_so_far:
        if len(answer_so_far) > max_context_chars:
            answer_so_far = "[...] " + answer_so_far[-max_context_chars:]
        parts.append(f"Answer so far (from an earlier workflow; improve or correct it):\n{answer_so_far}")
    if context:
        budget = max(max_context_chars // len(context), 200)
        shown = []
        for index, earlier_subtask, answer in context:
            if len(answer) > budget:
                answer = "[...] " + answer[-budget:]
            shown.append(f"Step {index} subtask: {earlier_subtask}\nStep {index} answer: {answer}")
        parts.append("Earlier steps you may use:\n" + "\n\n".join(shown))
    parts.append(f"Your subtask:\n{subtask}")
    if answer_format:
        parts.append(answer_format)
    return [{"role": "system", "content": WORKER_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


# How a worker is asked to state its answer so that the grader of its answer kind
# (conductor_rl/grading) finds it: math from the last \boxed{}; numbers, letters and
# free-form answers from an "Answer:" line; code from the last ```python block.
_CODE_BLOCK = "Give a complete Python solution in one ```python code block"
ANSWER_INSTRUCTIONS: dict[str, str] = {
    "math": "Put the final answer in \\boxed{}.",
    "numeric": "End with the line 'Answer: <number>', giving only the final number.",
    "choice": "End with the line 'Answer: <letter>', giving the letter of the correct option.",
    "exact": "End with the line 'Answer: <answer>', giving a short final answer.",
    "freeform": "End with the line 'Answer: <answer>', giving a short final answer.",
    "code_humaneval": f"{_CODE_BLOCK}: the function with the given signature and any imports it needs.",
    "code_stdio": f"{_CODE_BLOCK}: a program that reads standard input and prints to standard output.",
    "code_call": f"{_CODE_BLOCK}: the class or function of the starter code, without example calls.",
    "code_unittest": f"{_CODE_BLOCK}: the function asked for and the imports it needs.",
}


def answer_instruction(answer_kind: str) -> str:
    """The sentence that asks for the final answer in the form `answer_kind`'s grader reads."""
    if answer_kind not in ANSWER_INSTRUCTIONS:
        raise ValueError(
            f"no answer instruction for answer kind {answer_kind!r}; known kinds: {', '.join(ANSWER_INSTRUCTIONS)}"
        )
    return ANSWER_INSTRUCTIONS[answer_kind]


def apply_chat_template(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> str:
    """Render messages with the model's own chat template, ready for generation."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


class ConductorPrompt:
    """The Conductor's prompt for a question, as text and as the token ids the
    generator and the learner see, both from here. The ids are tokenised once
    per question and roster: training asks the same questions again and again.

    The text ends with the response prefix (the start of a plan, when the format
    is constrained), so a completion continues it. A question is asked with a
    roster (plan/roster.py: which workers its prompt lists, under which names); by
    default `roster`, the whole pool's. A number n stands for Model 0..n-1."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        n_workers: int | Roster,
        max_steps: int = 5,
        n_examples: int = 4,
        response_prefix: str = "",
        shape: PlanShape | None = None,
        show_answer_format: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.roster = as_roster(n_workers)
        self.max_steps = max_steps
        self.n_examples = n_examples
        self.response_prefix = response_prefix
        self.shape = shape  # the plan format samples must follow (None: free text)
        self.show_answer_format = show_answer_format
        self._ids: dict[tuple[str, Roster, str | None], list[int]] = {}

    @property
    def n_workers(self) -> int:
        return len(self.roster)

    @classmethod
    def from_config(cls, config: Config, tokenizer: PreTrainedTokenizerBase | None = None) -> ConductorPrompt:
        """The prompt of `config.conductor` for a pool of `config.workers`; loads
        the Conductor model's tokenizer unless one is given."""
        c = config.conductor
        if tokenizer is None:
            from transformers import AutoTokenizer

            from conductor_rl.models import resolve_model

            tokenizer = AutoTokenizer.from_pretrained(resolve_model(c.model))
        roster = roster_for(config)
        shape = None
        if c.constrain_format:
            shape = PlanShape(len(roster), c.max_steps, c.max_subtask_tokens, c.response_prefix, ids=roster.model_ids)
        return cls(tokenizer, roster, c.max_steps, c.n_examples, c.response_prefix, shape, c.show_answer_format)

    def _roster(self, listed: int | Roster | None) -> Roster:
        return self.roster if listed is None else as_roster(listed)

    def _shown(self, answer_format: str | None) -> str | None:
        return answer_format if self.show_answer_format else None

    def text(self, question: str, roster: int | Roster | None = None, answer_format: str | None = None) -> str:
        """The whole prompt, rendered with the model's chat template. `answer_format`: the
        instruction the plan's last step will be given (`Task.answer_format`, or
        `answer_instruction(question.answer_kind)`), shown only under `show_answer_format`."""
        messages = conductor_messages(
            question, self._roster(roster), self.max_steps, self.n_examples, self._shown(answer_format)
        )
        return apply_chat_template(self.tokenizer, messages) + self.response_prefix

    def ids(self, question: str, roster: int | Roster | None = None, answer_format: str | None = None) -> list[int]:
        """The prompt's token ids (the same list on every call for a question, roster and format)."""
        key = (question, self._roster(roster), self._shown(answer_format))
        if key not in self._ids:
            self._ids[key] = self.tokenizer(self.text(*key), add_special_tokens=False)["input_ids"]
        return self._ids[key]

    def shape_for(self, roster: int | Roster | None = None, allow_empty: bool = False) -> PlanShape | None:
        """The plan format of a prompt listing `roster` (None: free text); `allow_empty`:
        three empty lists are a plan too (a recursive call's "keep the answer")."""
        if self.shape is None:
            return None
        listed = self._roster(roster)
        return replace(self.shape, n_workers=len(listed), ids=listed.model_ids, allow_empty=allow_empty)

    def question_ids(self, question: Question, roster: int | Roster | None = None) -> list[int]:
        """`ids` of a benchmark question, with its grader's answer instruction."""
        return self.ids(question.question, roster, answer_instruction(question.answer_kind))

    def recursive_ids(
        self, question: str, roster: int | Roster, parent: str, answer_so_far: str, answer_format: str | None = None
    ) -> list[int]:
        """The token ids of a recursive call's prompt (not cached: each call's is its own)."""
        messages = recursive_messages(
            question,
            self._roster(roster),
            parent,
            answer_so_far,
            self.max_steps,
            self.n_examples,
            self._shown(answer_format),
        )
        text = apply_chat_template(self.tokenizer, messages) + self.response_prefix
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


def fitting_questions(
    questions: Sequence[Question], prompt: ConductorPrompt, max_model_len: int, max_new_tokens: int
) -> tuple[list[Question], int]:
    """The questions whose prompt leaves room for a whole plan (`max_new_tokens`)
    in a context of `max_model_len` tokens, and how many were left out: a longer
    prompt would crash the generator engine, not just lose its plan. Raises
    ConfigError when none fits."""
    room = max_model_len - max_new_tokens
    kept = [q for q in questions if len(prompt.question_ids(q)) <= room]
    if not kept:
        raise ConfigError(
            f"generator.max_model_len: no question's prompt fits in {max_model_len} tokens with "
            f"conductor.max_new_tokens={max_new_tokens}; raise generator.max_model_len"
        )
    return kept, len(questions) - len(kept)
