"""What one training iteration did, as numbers: reward, accuracy, format
failures, dropped rollouts, plan length, which worker each domain went to,
the plans' shapes per domain and difficulty, tokens and cost. The loop adds the learner's and the phases' figures; the
record goes to metrics.jsonl, TensorBoard and the Ray dashboard."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from conductor_rl.config import SimSpec, WorkerConfig
from conductor_rl.data.difficulty import band_of
from conductor_rl.grading import Verdict
from conductor_rl.rollout.recursion import StopCounts
from conductor_rl.rollout.rollouts import Rollout
from conductor_rl.workers.sim_expectation import expected_accuracy
from conductor_rl.workers.sim_rules import plan_shape


def best_workers(workers: Sequence[WorkerConfig]) -> dict[str, str]:
    """The best worker of each domain, where that is known: when every worker
    is simulated, the one with the highest declared accuracy (ties: none)."""
    sims = [(w.name, w.sim) for w in workers if w.sim is not None]
    if not workers or len(sims) < len(workers):
        return {}
    domains = {d for _, sim in sims for d in sim.accuracy if d != "default"}
    best = {}
    for domain in sorted(domains):
        scores = [(sim.accuracy.get(domain, sim.accuracy.get("default", 0.0)), name) for name, sim in sims]
        top = max(s for s, _ in scores)
        leaders = [name for s, name in scores if s == top]
        if len(leaders) == 1:
            best[domain] = leaders[0]
    return best


def final_worker(rollout: Rollout, worker_names: Sequence[str]) -> str | None:
    """The worker of the plan's last step: the one whose answer is graded."""
    plan = rollout.pool_plan  # None exactly when rollout.plan is
    if plan is None or not plan.steps:
        return None
    return worker_names[plan.steps[-1].model_id]


def plan_shapes(
    rollouts: Sequence[Rollout], worker_names: Sequence[str], specs: Sequence[SimSpec] | None = None
) -> dict[str, dict]:
    """How the parsed plans look per question domain and difficulty band ("math/hard"): how many,
    their mean steps, the share of one-step plans and of plans with a step that checks an earlier
    answer (conductor_rl/workers/sim_rules.py says what a check is), the share each worker ends
    them, the worker most plans end on, and, for a simulated pool (`specs`), their exact expected
    accuracy (`expected_accuracy`)."""
    groups: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        if r.pool_plan is not None and r.pool_plan.steps:
            groups[f"{r.task.domain}/{band_of(r.task.difficulty)}"].append(r)
    shapes = {}
    for key, group in sorted(groups.items()):
        plans = [r.pool_plan for r in group if r.pool_plan is not None]
        checks = [plan_shape([(s.subtask, p.visible(i)) for i, s in enumerate(p.steps)])[1] for p in plans]
        ends = Counter(final_worker(r, worker_names) for r in group)
        shapes[key] = {
            "plans": len(plans),
            "steps": statistics.fmean(len(p.steps) for p in plans),
            "single_step_share": sum(len(p.steps) == 1 for p in plans) / len(plans),
            "checking_share": sum(checks) / len(plans),
            "final_worker": ends.most_common(1)[0][0],
            "final_worker_shares": {name: ends[name] / len(group) for name in worker_names},
        }
        if specs is not None:
            shapes[key]["expected_accuracy"] = _mean_expected(group, specs)
    return shapes


def rollout_expected_accuracy(rollout: Rollout, specs: Sequence[SimSpec]) -> float | None:
    """The exact chance that the rollout's plan answers right in a simulated pool (0 for a plan error;
    None where it cannot be computed: a plan that calls the Conductor's seat, an empty plan)."""
    if rollout.plan_error is not None:
        return 0.0
    plan = rollout.pool_plan
    if plan is None:
        return None
    t = rollout.task
    return expected_accuracy(plan, t.question, t.domain, t.difficulty, specs)


def _mean_expected(rollouts: Sequence[Rollout], specs: Sequence[SimSpec]) -> float | None:
    values = [v for r in rollouts if (v := rollout_expected_accuracy(r, specs)) is not None]
    return statistics.fmean(values) if values else None


def listed(rollout: Rollout, worker_names: Sequence[str]) -> list[str]:
    """The workers the rollout's prompt listed."""
    return list(worker_names) if rollout.roster is None else rollout.roster.select(worker_names)


def iteration_metrics(
    rollouts: Sequence[Rollout],
    worker_names: Sequence[str],
    best: dict[str, str] | None = None,
    specs: Sequence[SimSpec] | None = None,
) -> dict:
    """The iteration's record; `specs`: the pool's sim specs when every worker is simulated, for the exact
    expected accuracy of the plans sampled (`expected_accuracy`: free of the workers' draws, so a learning
    curve shows through their noise) and its training reward (`expected_reward_mean`)."""
    rewarded = [r.reward for r in rollouts if r.reward is not None]
    verdicts = [r.grade.verdict for r in rollouts if r.grade is not None and r.grade.verdict is not Verdict.ERROR]
    parsed = [r for r in rollouts if r.plan is not None]
    pool_plans = [plan for r in parsed if (plan := r.pool_plan) is not None]  # one for each parsed rollout
    dropped = [r for r in parsed if r.reward is None]
    n = max(len(rollouts), 1)

    steps = Counter(worker_names[s.model_id] for plan in pool_plans for s in plan.steps)
    total_steps = max(sum(steps.values()), 1)
    by_domain: dict[str, Counter] = defaultdict(Counter)
    for r in parsed:
        by_domain[r.task.domain][final_worker(r, worker_names)] += 1
    usage_in = usage_out = 0
    for r in rollouts:
        if r.workflow is not None:
            usage_in += r.workflow.usage.input_tokens
            usage_out += r.workflow.usage.output_tokens

    record: dict[str, Any] = {
        "rollouts": len(rollouts),
        "reward_mean": statistics.fmean(rewarded) if rewarded else 0.0,
        "reward_std": statistics.pstdev(rewarded) if len(rewarded) > 1 else 0.0,
        "accuracy": sum(v is Verdict.CORRECT for v in verdicts) / max(len(verdicts), 1),
        "format_failure_rate": sum(r.plan_error is not None for r in rollouts) / n,
        "infra_error_rate": len(dropped) / n,
        # Final answers lost to a worker's output limit (reward 0.5, but a sign the pool is misconfigured).
        "truncated_rate": sum(v is Verdict.TRUNCATED for v in verdicts) / max(len(verdicts), 1),
        "empty_after_length_steps": sum(s.empty_after_length for r in parsed if r.workflow for s in r.workflow.steps),
        "retried_rollouts": sum(r.attempts > 1 for r in rollouts),
        "steps_per_plan": statistics.fmean(len(plan.steps) for plan in pool_plans) if pool_plans else 0.0,
        "conductor_tokens": sum(
            len(r.completion_ids) + sum(len(c.completion_ids) for c in r.inner_calls) for r in rollouts
        ),
        "worker_input_tokens": usage_in,
        "worker_output_tokens": usage_out,
        "cost_usd": sum(r.workflow.cost_usd for r in rollouts if r.workflow is not None),
        "worker_usage": {name: steps[name] / total_steps for name in worker_names},
        "final_worker_by_domain": {
            domain: {name: counts[name] / max(sum(counts.values()), 1) for name in worker_names}
            for domain, counts in sorted(by_domain.items())
        },
        "plan_shapes": plan_shapes(parsed, worker_names, specs),
    }
    if specs is not None and (exact := [v for r in rollouts if (v := rollout_expected_accuracy(r, specs)) is not None]):
        record["expected_accuracy"] = statistics.fmean(exact)
        # A plan error's reward is 0, not 0.5 + 0.5 x 0 (conductor_rl/grading/verdict.py).
        record["expected_reward_mean"] = statistics.fmean(
            0.0 if r.plan_error is not None else 0.5 + 0.5 * v
            for r in rollouts
            if (v := rollout_expected_accuracy(r, specs)) is not None
        )
    if any(r.roster is not None and not r.roster.is_full(len(worker_names)) for r in rollouts):
        # Adaptive pools: how many workers the prompts listed, and how often each one was.
        record["roster_size_mean"] = statistics.fmean(len(listed(r, worker_names)) for r in rollouts)
        shown = Counter(name for r in rollouts for name in listed(r, worker_names))
        record["worker_listed"] = {name: shown[name] / n for name in worker_names}
    made = [c for r in rollouts for c in r.inner_calls if c.made]
    if made or any(r.forced for r in rollouts):
        # Recursion: how often the Conductor was called again, how often it kept the answer, and
        # whether it stops when the answer is right and goes on when it is wrong.
        stops = StopCounts.of(made)
        record["recursive_calls_per_rollout"] = len(made) / n
        record["recursion_kept_share"] = sum(c.kept for c in made) / max(len(made), 1)
        record["recursion_stop_rate_when_right"] = stops.rate_when_right
        record["recursion_stop_rate_when_wrong"] = stops.rate_when_wrong
        record["recursion_depth_max"] = max((c.depth for c in made), default=0)
        record["forced_rollouts"] = sum(r.forced for r in rollouts)
        # Chosen calls: rollouts outside the forced groups whose plan gave a step to the Conductor.
        unforced = [r for r in rollouts if not r.forced]
        record["chosen_recursion_share"] = (
            sum(any(c.made and not c.forced for c in r.inner_calls) for r in unforced) / len(unforced)
            if unforced
            else None
        )
    if best:
        # Judged where the best worker was listed: a prompt without it cannot choose it.
        judged = [r for r in parsed if r.task.domain in best and best[r.task.domain] in listed(r, worker_names)]
        if judged:
            record["best_worker_share"] = sum(
                final_worker(r, worker_names) == best[r.task.domain] for r in judged
            ) / len(judged)
    return record
