"""A simulated worker for offline runs.

It plays a worker of declared skill: given a question's reference answer (in the
request's `TaskHint`), it answers with the reference with a chance that
conductor_rl/workers/sim_rules.py decides, otherwise with a plausible wrong answer
in the same format. The chance is `accuracy[domain]`, lower on harder questions
(`hard_accuracy`), plus `gain_with_context` when the step reads earlier answers,
lower when its subtask carries none of the question's content (`off_task_factor`);
a step that reads earlier answers and is worded as a check keeps a right one right
(`keep_rate`) or repairs a wrong one (`repair_rate`). docs/guide/simulator.md has
the rules and what a simulated pool can and cannot show. Latency and token counts
are simulated too. Every response carries `simulated=True`, and the text says so,
so that simulated figures are never mistaken for real ones.

Draws are seeded by (seed, worker, question, rollout key, subtask, context), so
a run is reproducible whatever order the asyncio scheduler runs steps in.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
import time

from conductor_rl.config import SimSpec, WorkerConfig
from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.providers.base import ProviderError, TaskHint, Usage, WorkerRequest, WorkerResponse
from conductor_rl.workers.sim_rules import format_answer, is_right, on_task, step_role, success_chance

CHARS_PER_TOKEN = 4  # rough; only used to make simulated input token counts plausible


class SimProvider:
    simulated = True

    def __init__(self, config: WorkerConfig, seed: int = 0) -> None:
        assert config.sim is not None, "SimProvider needs a sim spec"
        self.name = config.name
        self.config = config
        self.spec: SimSpec = config.sim
        self.seed = seed

    def accuracy(self, domain: str, reads_context: bool) -> float:
        """The chance of a solving, on-task step on the easiest questions of `domain`."""
        return success_chance(self.spec, domain, 0.0, "solve", True, reads_context, False)

    def chance(self, hint: TaskHint) -> float:
        """The chance that the step `hint` describes answers right (conductor_rl/workers/sim_rules.py)."""
        reads = bool(hint.visible_answers)
        # The workflow passes the answers in step order: a check judges the latest one.
        checked_right = reads and is_right(hint.visible_answers[-1], hint.reference, hint.answer_kind)
        # A hint that carries no question (built by hand) has nothing to judge the wording against.
        topical = on_task(hint.subtask, hint.question) if hint.question else True
        role = step_role(hint.subtask, reads)
        return success_chance(self.spec, hint.domain, hint.difficulty, role, topical, reads, checked_right)

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        started = time.perf_counter()
        rng = random.Random(self._seed_for(request))
        if self.spec.latency_s > 0:
            spread = self.spec.latency_jitter
            await asyncio.sleep(self.spec.latency_s * (1.0 + rng.uniform(-spread, spread)))
        if rng.random() < self.spec.fail_rate:
            raise ProviderError(f"simulated fault in worker {self.name!r}", kind="simulated_fault", retryable=True)

        hint = request.hint
        if hint is None:
            text = f"[simulated {self.name}] I can only act out answers to known questions."
        else:
            correct = rng.random() < self.chance(hint)
            answer = hint.reference if correct else wrong_answer(hint, rng)
            text = f"[simulated {self.name}] {format_answer(answer, hint.answer_kind)}"

        prompt_chars = sum(len(m.get("content", "")) for m in request.messages)
        output_tokens = min(request.max_tokens, max(1, int(self.spec.output_tokens * rng.uniform(0.5, 1.5))))
        usage = Usage(input_tokens=max(1, prompt_chars // CHARS_PER_TOKEN), output_tokens=output_tokens)
        return WorkerResponse(
            text=text,
            usage=usage,
            latency_s=time.perf_counter() - started,
            cost_usd=cost_of(usage, self.config.price),
            simulated=True,
            finish_reason="stop",  # a simulated answer is always whole, however few tokens it counts
        )

    async def aclose(self) -> None:
        return None

    def _seed_for(self, request: WorkerRequest) -> int:
        hint = request.hint
        parts = [str(self.seed), self.name, request.messages[-1].get("content", "") if request.messages else ""]
        if hint is not None:
            parts += [hint.question_id, hint.sample_key, *hint.visible_answers]
        digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
        return int.from_bytes(digest[:8], "big")


_LETTERS = "ABCDEFGHIJ"


def wrong_answer(hint: TaskHint, rng: random.Random) -> str:
    """A plausible wrong answer of the same shape as the reference."""
    reference = hint.reference.strip()
    if hint.answer_kind == "choice":
        n = max(2, _LETTERS.index(reference) + 1 if reference in _LETTERS else 4, 4)
        return rng.choice([c for c in _LETTERS[:n] if c != reference])
    if hint.answer_kind.startswith("code"):
        # The prompt with a body that cannot pass: a typical wrong-but-runnable answer.
        header = reference.split('"""')[0].rstrip() if '"""' in reference else reference.splitlines()[0]
        return f"{header}\n    return None\n"
    return _perturb_number(reference, rng)


_DIGIT = re.compile(r"\d")


def _perturb_number(reference: str, rng: random.Random) -> str:
    digits = list(_DIGIT.finditer(reference))
    if not digits:
        return f"{reference}+1" if reference else "0"
    # Change the last digit: keeps the form (fraction, root, percent) and the magnitude.
    spot = digits[-1]
    new_digit = str((int(spot.group()) + rng.randint(1, 9)) % 10)
    return reference[: spot.start()] + new_digit + reference[spot.end() :]
