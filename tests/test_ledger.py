"""The cost ledger and the guarded worker call (limits, retries, budget), in one
process, with the real SDKs against the local server."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from conductor_rl.plan import parse_plan
from conductor_rl.rollout.workflow import Task, run_plan
from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.guarded import GuardedProvider
from conductor_rl.workers.ledger import BudgetExceededError, CostLedger
from conductor_rl.workers.limits import AsyncRateLimiter, WindowLimits
from conductor_rl.workers.providers import ProviderError, Usage, build_provider
from conductor_rl.workers.retry import RetryPolicy
from tests.http_fakes import HTTP_PROVIDERS, PRICE, request, worker_config

# Every test talks to the fake LLM server: the fake key set, the server reset (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh")

FAST_RETRIES = RetryPolicy(max_retries=3, base_delay_s=0.01, max_delay_s=0.05)


def guarded(provider, server, ledger, limiter=None, policy=FAST_RETRIES, price=None, **extra):
    return GuardedProvider(
        build_provider(worker_config(provider, server, **extra)),
        provider_kind=provider,
        ledger=ledger,
        limiter=limiter,
        policy=policy,
        price=price,
    )


def test_ledger_costs_equal_usage_times_price_for_every_call_across_providers(server):
    ledger = CostLedger()

    async def go():
        workers = [guarded(p, server, ledger) for p in HTTP_PROVIDERS]
        for iteration in (0, 1):
            ledger.start_iteration(iteration)
            await asyncio.gather(*(w.complete(request(f"q{iteration}-{i}")) for w in workers for i in range(3)))
        for w in workers:
            await w.aclose()

    asyncio.run(go())
    assert len(ledger.entries) == len(server.stats.usages) == 2 * 3 * len(HTTP_PROVIDERS)
    # Every answer the server gave, priced independently of the providers' parsing:
    expected = sum(
        ((u["input"] - u["cached"]) * PRICE.input + u["cached"] * PRICE.cached_input + u["output"] * PRICE.output) / 1e6
        for u in server.stats.usages
    )
    assert ledger.total_usd == pytest.approx(expected, rel=1e-12)
    assert all(e.cost_usd == pytest.approx(cost_of(e.usage, PRICE)) for e in ledger.entries)
    by_provider = ledger.by("provider")
    assert set(by_provider) == set(HTTP_PROVIDERS) and all(t.calls == 6 for t in by_provider.values())
    assert {k: v.calls for k, v in ledger.by("iteration").items()} == {0: 15, 1: 15}
    assert sum(t.cost_usd for t in ledger.by("worker").values()) == pytest.approx(ledger.total_usd)
    totals = ledger.totals()
    assert totals.input_tokens == sum(u["input"] for u in server.stats.usages)
    assert totals.reasoning_tokens == sum(u["reasoning"] for u in server.stats.usages)


def test_retries_recover_and_count_each_attempt_against_the_limit(server):
    limiter = AsyncRateLimiter(WindowLimits(rpm=100, tpm=None, window_s=60.0))
    ledger = CostLedger()
    server.script(["500", "429:0.2", "drop", "malformed"])
    worker = guarded("openai", server, ledger, limiter, policy=RetryPolicy(max_retries=4, base_delay_s=0.01))
    response = asyncio.run(worker.complete(request()))
    assert response.text.startswith("echo:")
    assert server.stats.requests == 5 and len(ledger.entries) == 1  # only the answer is billed
    assert limiter.limits.in_window()[0] == 5  # every attempt counted
    assert limiter.limits.cooldown_until > 0  # the 429 cooled the key down


def test_a_fault_is_never_lost_silently(server):
    """Retries exhausted or not retryable: the rollout reports an infrastructure
    error naming the fault; it is never a wrong answer or a missing step."""
    ledger = CostLedger()
    workers = [guarded("anthropic", server, ledger, name="a"), guarded("google", server, ledger, name="g")]
    plan = parse_plan('model_id = [0, 1]\nsubtasks = ["solve", "check"]\naccess_list = [[], "all"]', 2)
    task = Task(id="t", question="2+2?", reference="4", answer_kind="numeric")
    server.script(["500"] * 4)  # step 0: one try and three retries, all fail
    result = asyncio.run(run_plan(plan, task, workers))
    assert result.error and "server_error" in result.error and "after 4 attempts" in result.error
    assert result.final_answer is None and result.steps[1].error.startswith("skipped")
    server.script(["ok", "400"])
    result = asyncio.run(run_plan(plan, task, workers))
    assert "bad_request" in result.error and result.steps[0].response.startswith("echo:"), result
    assert len(ledger.entries) == 1  # the finished step 0 was billed


def test_a_budget_stop_inside_a_plan_is_an_infrastructure_error(server):
    ledger = CostLedger(budget_usd=0.0)
    plan = parse_plan('model_id = [0]\nsubtasks = ["solve"]\naccess_list = [[]]', 1)
    result = asyncio.run(run_plan(plan, Task(id="t", question="q"), [guarded("openai", server, ledger)]))
    assert result.error.startswith("step 0: budget_exceeded: worker budget reached")
    assert server.stats.requests == 0


def test_budget_stop_keeps_every_finished_call(server):
    """Calls in flight when the budget is reached finish and are recorded;
    no call starts afterwards; the caller gets BudgetExceededError."""
    server.reset(latency_s=0.5)
    one_call = cost_of(Usage(input_tokens=20, output_tokens=8, cached_tokens=2), PRICE)
    ledger = CostLedger(budget_usd=one_call * 2.5)  # reached by the third finished call
    worker = guarded("openai", server, ledger)

    async def go():
        first = await asyncio.gather(*(worker.complete(request(f"a{i}")) for i in range(6)), return_exceptions=True)
        later = await asyncio.gather(*(worker.complete(request(f"b{i}")) for i in range(3)), return_exceptions=True)
        return first, later

    first, later = asyncio.run(go())
    assert all(not isinstance(r, Exception) for r in first)  # all six were in flight: all finish
    assert all(isinstance(r, BudgetExceededError) for r in later)
    assert "Raise the budget" in str(later[0]) and "budget_usd" in str(later[0])
    assert len(ledger.entries) == 6 == server.stats.ok == server.stats.requests
    assert ledger.total_usd == pytest.approx(sum(r.cost_usd for r in first))
    assert ledger.exhausted


def test_errors_survive_pickling():
    err = ProviderError("HTTP 429", kind="rate_limited", retryable=True, retry_after_s=1.5)
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.kind, back.retryable, back.retry_after_s) == ("HTTP 429", "rate_limited", True, 1.5)
    budget = pickle.loads(pickle.dumps(BudgetExceededError(2.0, 1.0)))
    assert budget.spent_usd == 2.0 and str(budget) == str(BudgetExceededError(2.0, 1.0))


def test_the_budget_message_says_what_was_spent_and_how_to_raise_it_in_training_and_in_ask():
    message = str(BudgetExceededError(2.5, 2.0))
    assert "spent $2.5000 of the $2.0000 budget" in message
    assert "train.budget_usd" in message and "--budget-usd" in message and "Orchestrator.from_config" in message
    assert "checkpoint" not in message  # outside training there is none to resume from


def test_negative_budget_is_refused():
    with pytest.raises(ValueError, match="budget_usd"):
        CostLedger(budget_usd=-1)


# ---------------------------------------------------------------- calls whose outcome is never seen


def test_a_call_left_open_is_counted_at_its_worst_case_and_spends_the_budget():
    ledger = CostLedger(budget_usd=1.0)
    ledger.start_iteration(3)
    ledger.open_call("a", "w", "openai", max_cost_usd=0.75)
    ledger.open_call("b", "w", "openai", max_cost_usd=0.75)
    ledger.start_iteration(4)
    ledger.record("w", "openai", Usage(10, 5), 0.25, call_id="a")
    assert ledger.by("iteration")[3].cost_usd == 0.25  # booked where it was opened
    assert not ledger.exhausted
    assert ledger.settle_open_calls() == 1  # "b" never came back (its process died)
    assert ledger.settle_open_calls() == 0
    assert ledger.total_usd == pytest.approx(1.0) and ledger.exhausted
    summary = ledger.summary()
    assert summary["unsettled"]["calls"] == 1 and summary["unsettled"]["cost_usd"] == pytest.approx(0.75)
    assert summary["by_iteration"]["3"]["calls"] == 2
    with pytest.raises(BudgetExceededError):
        ledger.open_call("c", "w", "openai", 0.1)
    resumed = CostLedger(budget_usd=2.0)
    resumed.restore(summary)
    assert resumed.summary()["unsettled"] == summary["unsettled"] and resumed.total_usd == pytest.approx(1.0)


def test_a_call_closed_before_its_open_arrives_is_not_left_open():
    """Without a budget the open is not awaited, and Ray may deliver it after the record."""
    ledger = CostLedger()
    ledger.record("w", "openai", Usage(1, 1), 0.5, call_id="x")
    ledger.close_call("y")
    ledger.open_call("x", "w", "openai", 9.0, admit=False)
    ledger.open_call("y", "w", "openai", 9.0, admit=False)
    assert ledger.settle_open_calls() == 0 and ledger.total_usd == pytest.approx(0.5)


def test_a_call_cut_off_before_its_open_arrives_is_settled_as_lost_when_it_does():
    ledger = CostLedger()
    ledger.lose_call("z", "cancelled mid-call")
    ledger.open_call("z", "w", "openai", 2.5, admit=False)
    assert ledger.settle_open_calls() == 0
    assert ledger.total_usd == pytest.approx(2.5) and ledger.summary()["unsettled"]["cost_usd"] == pytest.approx(2.5)


def test_guarded_calls_close_what_they_open(server, tmp_path):
    """Answered calls are recorded, refused ones closed unbilled, a cancelled one settled at once as
    lost: it may have been billed and no bill will come, so it costs its worst case (input estimate +
    max_tokens), in the journal too; one cancelled before it was sent costs nothing."""
    from conductor_rl.workers.spend_journal import JOURNAL_FILE, read_books

    ledger = CostLedger.from_journal(tmp_path / JOURNAL_FILE, job="serve", sync=True)
    limiter = AsyncRateLimiter(WindowLimits(rpm=1, tpm=None, window_s=60.0))

    async def go():
        worker = guarded("openai", server, ledger, price=PRICE)
        await worker.complete(request("fine"))
        server.script(["400", "slow:5"])
        with pytest.raises(ProviderError):
            await worker.complete(request("refused"))
        call = asyncio.ensure_future(worker.complete(request("cut off")))
        while server.stats.requests < 3:  # cut off once the server has it (and the script holds it 5 s)
            await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # Held by the limiter (one call a minute, taken above): cancelled before it was sent.
        limited = guarded("openai", server, ledger, limiter=limiter, price=PRICE)
        await limiter.acquire(1)
        waiting = asyncio.ensure_future(limited.complete(request("never sent")))
        await asyncio.sleep(0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await worker.aclose()
        await limited.aclose()
        return worker.worst_case_cost(request("cut off"))

    worst = asyncio.run(go())
    assert server.stats.requests == 3  # the held call never reached the server
    assert worst > 0 and ledger.settle_open_calls() == 0  # nothing left open: serve never settles
    assert ledger.total_usd == pytest.approx(ledger.entries[0].cost_usd + worst)
    assert ledger.summary()["unsettled"]["cost_usd"] == pytest.approx(worst)
    ledger.journal.close()
    books = read_books(tmp_path / JOURNAL_FILE)
    assert [e["outcome"] for e in books.lost] == ["cancelled mid-call"] and books.lost[0]["usd"] == pytest.approx(worst)
    assert [e["outcome"] for e in books.failed][-1] == "cancelled before it was sent" and not books.open
    assert books.spent_usd == pytest.approx(ledger.total_usd)


class RecordingLimiter:
    """A limiter that lets everything through and keeps what each call's settle said."""

    def __init__(self) -> None:
        self.sent_ago: list[float] = []

    async def acquire(self, tokens: int = 0, since: float | None = None) -> tuple[int, float]:
        return 1, 0.0

    def settle(self, grant_id: int, actual_tokens: int | None = None, sent_ago_s: float = 0.0) -> None:
        self.sent_ago.append(sent_ago_s)

    def cool_down(self, seconds: float) -> None:
        pass


def test_calls_sent_before_a_providers_first_answer_count_from_their_answer(server):
    """A fresh SDK client's first requests leave later than the moment they were handed to it, so the
    limiter counts them from their answer; calls sent once an answer came back count from their send."""
    limiter = RecordingLimiter()
    server.latency_s = 0.2

    async def go():
        worker = guarded("openai", server, CostLedger(), limiter=limiter)
        await asyncio.gather(*(worker.complete(request(f"cold {i}")) for i in range(3)))
        await worker.complete(request("warm"))

    asyncio.run(go())
    assert limiter.sent_ago[:3] == [0.0, 0.0, 0.0]
    assert limiter.sent_ago[3] >= 0.2
