"""Money survives a crash: a training driver, or an evaluation, and the local Ray cluster it started
killed at once (SIGKILL to every one of their processes: a lost head node) with calls in flight, then
resumed with a budget just above what was spent. The workers are real SDK clients of the local
provider server, whose own counters say what was billed. The training's generator and learner are
stand-ins (tests/light_system.py); the evaluation runs the baselines, which need no Conductor: the
books are the worker pool's."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.providers import Usage
from conductor_rl.workers.spend_journal import JOURNAL_FILE, Books, read_books
from tests.http_fakes import FAKE_KEY, KEY_ENV, PRICE
from tests.test_train import HANG_GUARD_S, latest_state, overrides, run_json, subprocess_env

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.usefixtures("fresh"), pytest.mark.timeout(2 * HANG_GUARD_S)]


def http_workers(server) -> list[str]:
    """Every worker of the embedded pool as an OpenAI-compatible client of the local server, at one price."""
    url = server.base_url_for("openai_compatible")
    return [
        setting
        for i in range(3)
        for setting in (
            f"workers.{i}.provider=openai_compatible",
            f"workers.{i}.model=fake-model",
            f"workers.{i}.api_key_env={KEY_ENV}",
            f"workers.{i}.base_url={url}",
            f"workers.{i}.price.input={PRICE.input}",
            f"workers.{i}.price.output={PRICE.output}",
            f"workers.{i}.price.cached_input={PRICE.cached_input}",
        )
    ]


def kill_when(argv: list[str], journal: Path, until: Callable[[Books], bool]) -> None:
    """`python argv...` in a process of its own, killed with SIGKILL, with every process of the Ray cluster it
    started, as soon as its spend journal's books satisfy `until`."""
    import psutil

    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=REPO,
        env={**subprocess_env(), KEY_ENV: FAKE_KEY},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not until(read_books(journal)):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"not reached (exit {proc.poll()}): {proc.stderr.read()[-4000:]}")
            time.sleep(0.05)
    finally:
        try:
            everything = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            everything = []
        for process in everything:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        psutil.wait_procs(everything, timeout=30)


def server_billed_usd(server) -> float:
    return sum(cost_of(Usage(u["input"], u["output"], 0, u["cached"]), PRICE) for u in server.stats.usages)


def assert_the_books_hold_what_the_server_billed(crashed: Books, server) -> None:
    """Each call the journal says was billed is one the server billed, token for token; the server's other
    bills are calls cut off by the kill, open in the journal at a worst case above their bill."""
    assert crashed.billed and crashed.open, "the kill came with no call billed or none in flight"
    billed = collections.Counter((e["in"], e["out"], e["cached"]) for e in crashed.billed)
    served = collections.Counter((u["input"], u["output"], u["cached"]) for u in server.stats.usages)
    assert not billed - served, "the journal holds a bill the server never sent"
    unseen = list((served - billed).elements())
    assert len(unseen) <= len(crashed.open)
    worst = min(e["max_usd"] for e in crashed.open)
    assert all(cost_of(Usage(i, o, 0, c), PRICE) <= worst for i, o, c in unseen)
    assert sum(e["usd"] for e in crashed.billed) == pytest.approx(
        sum(cost_of(Usage(i, o, 0, c), PRICE) for i, o, c in billed.elements()), abs=0.005
    )
    assert crashed.at_most_usd >= server_billed_usd(server)


def assert_the_resume_settled_the_crash(crashed: Books, resumed: Books) -> None:
    assert [s["session"] for s in resumed.sessions] == [1, 2]
    assert not resumed.open  # the resume settled the cut-off calls as lost, at their worst case
    assert {e["id"] for e in resumed.lost} == {e["id"] for e in crashed.open}
    assert all(e["s"] == 2 for e in resumed.lost)


def figures(server, books: Books, ledger_usd: float) -> str:
    journal_billed = sum(e["usd"] for e in books.billed)
    return (
        f"provider billed ${server_billed_usd(server):.6f} for {len(server.stats.usages)} calls; journal: "
        f"${journal_billed:.6f} billed ({len(books.billed)} calls) + ${books.spent_usd - journal_billed:.6f} "
        f"lost at worst case ({len(books.lost)} calls) = ${books.spent_usd:.6f}; ledger after the resume "
        f"${ledger_usd:.6f}"
    )


def test_a_driver_killed_mid_iteration_loses_no_billed_call_and_its_resume_stops_at_the_budget(
    ray_cluster, server, tmp_path, light_system, capsys
):
    server.reset(latency_s=0.3)  # calls are in flight when the kill comes
    out = tmp_path / "run"
    journal = out / JOURNAL_FILE
    light_system.spread = 3
    argv = overrides(
        out,
        "train.iterations=3",
        "train.checkpoint_every=1",
        "train.report=false",
        "train.loggers=[]",
        "train.preflight=false",
        *http_workers(server),
    )
    kill_when(["-m", "tests.light_system", *argv], journal, lambda books: any(e.get("it") == 1 for e in books.open))
    time.sleep(1.0)  # the server finishes what was in flight: it bills calls the driver never heard back from

    crashed = read_books(journal)
    assert_the_books_hold_what_the_server_billed(crashed, server)
    spent_before = crashed.at_most_usd
    state = latest_state(out)[1]
    assert state["iteration"] == 0  # iteration 1 was cut short: it is redone
    assert state["ledger"]["total"]["cost_usd"] < spent_before  # the checkpoint alone would undercount

    # Resumed with a budget just above what was spent before the crash: the books come from the journal,
    # so the resumed run stops within its first round of calls.
    calls_before = len(server.stats.usages)
    code, summary = run_json([*argv, f"train.budget_usd={spent_before + 1e-6}", "--resume"], capsys)
    assert code == 0 and summary["stopped"] == "budget" and summary["iterations"] == 1, summary
    resumed = read_books(journal)
    assert_the_resume_settled_the_crash(crashed, resumed)
    session2 = [e for e in resumed.billed if e["s"] == 2]
    assert session2 and all(e["it"] == 1 for e in session2)  # iteration 1 redone, its first attempt kept
    assert len(server.stats.usages) - calls_before <= 3 * 4  # one round of plans at most (2 questions x 4)
    saved = latest_state(out)[1]["ledger"]["total"]["cost_usd"]
    assert saved == pytest.approx(resumed.spent_usd, abs=1e-9)  # the ledger is the journal's
    assert "1 finished iteration(s)" in summary["forecast"]["basis"]  # the resume's forecast: iteration 0's cost
    print(
        f"\n{figures(server, resumed, saved)}; checkpoint before the kill ${state['ledger']['total']['cost_usd']:.6f}; "
        f"resumed run's forecast ${summary['forecast']['usd'][0]:.6f}-${summary['forecast']['usd'][1]:.6f} "
        f"({summary['forecast']['basis']}), spent ${summary['spent_usd']:.6f} in all"
    )
    assert json.dumps(resumed.sessions).count(FAKE_KEY) == 0 and FAKE_KEY not in journal.read_text()


def test_an_evaluation_killed_with_calls_in_flight_loses_no_billed_call_and_its_rerun_stops_at_the_budget(
    ray_cluster, server, tmp_path, capsys
):
    from jobs.evaluate import main

    server.reset(latency_s=0.3)
    out = tmp_path / "evaluation"
    journal = out / JOURNAL_FILE
    argv = [
        "evaluate.benchmarks=[samples:math500:eval]",
        "evaluate.methods=[single:*, reflect:*:1]",
        "evaluate.limit=3",
        "evaluate.repeats=2",
        "evaluate.progress=false",
        "evaluate.preflight=false",
        f"evaluate.output_dir={out}",
        *http_workers(server),
    ]
    # Killed once a reflection (the second method) has calls on the books and others in flight.
    kill_when(
        ["-m", "jobs.evaluate", *argv],
        journal,
        lambda books: any(e["cell"].startswith("reflect") for e in books.billed) and bool(books.open),
    )
    time.sleep(1.0)
    crashed = read_books(journal)
    assert_the_books_hold_what_the_server_billed(crashed, server)
    assert not (out / "results.json").exists(), "the kill came after the end"

    # Run again with a budget just above what the journal holds: it stops within its first round of calls.
    calls_before = len(server.stats.usages)
    code = main(["--json", *argv, "--budget-usd", str(crashed.at_most_usd + 1e-6)])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and summary["stopped"] == "budget", summary
    resumed = read_books(journal)
    assert_the_resume_settled_the_crash(crashed, resumed)
    assert len(server.stats.usages) - calls_before <= 3 * 2 * 3  # one batch of reflections at most
    assert summary["spent_total_usd"] == pytest.approx(resumed.spent_usd, abs=1e-9)  # the ledger is the journal's
    assert resumed.spent_usd >= server_billed_usd(server)
    print(f"\n{figures(server, resumed, summary['spent_total_usd'])}; the rerun's forecast {summary['forecast']}")
