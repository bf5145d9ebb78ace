"""The spend journal: every call on disk, the ledger rebuilt from it, crashes that tear or cut it.
In one process, with the real SDKs against the local server."""

from __future__ import annotations

import asyncio
import collections
import json

import pytest

from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.guarded import GuardedProvider
from conductor_rl.workers.ledger import BudgetExceededError, CostLedger
from conductor_rl.workers.providers import CallKey, ProviderError, Usage, WorkerRequest, build_provider
from conductor_rl.workers.retry import RetryPolicy
from conductor_rl.workers.spend_journal import (
    FSYNC_WITHIN_S,
    JOURNAL_FILE,
    JournalLockedError,
    JournalWriteError,
    SpendJournal,
    read_events,
)
from tests.http_fakes import FAKE_KEY, HTTP_PROVIDERS, PRICE, worker_config

QUESTION = "How many legs does a spider have? (journal test)"


def call(provider: str, server, ledger: CostLedger, n: int, retries: int = 0) -> list:
    async def go():
        worker = GuardedProvider(
            build_provider(worker_config(provider, server)),
            provider_kind=provider,
            ledger=ledger,
            policy=RetryPolicy(max_retries=retries, base_delay_s=0.01, max_delay_s=0.02),
            price=PRICE,
            model="fake-model",
            journaled=True,
        )
        request = WorkerRequest(
            [{"role": "user", "content": QUESTION}], max_tokens=64, temperature=0.2, key=CallKey("q7", "it0/0/3/1", 2)
        )
        try:
            return await asyncio.gather(*(worker.complete(request) for _ in range(n)), return_exceptions=True)
        finally:
            await worker.aclose()

    return asyncio.run(go())


@pytest.mark.usefixtures("fresh")
def test_every_billed_call_is_in_the_journal_as_the_server_billed_it_and_nothing_secret(server, tmp_path):
    path = tmp_path / JOURNAL_FILE
    ledger = CostLedger.from_journal(path, job="train", sync=True)
    ledger.start_iteration(4)
    for provider in HTTP_PROVIDERS:
        call(provider, server, ledger, 2)
    server.script(["500"])  # refused at the server: journalled as failed, not billed
    assert isinstance(call("openai", server, ledger, 1)[0], ProviderError)

    events = list(read_events(path))
    billed = [e for e in events if e["ev"] == "billed"]
    assert len(billed) == len(server.stats.usages) == 2 * len(HTTP_PROVIDERS)
    server_billed = sum(cost_of(Usage(u["input"], u["output"], 0, u["cached"]), PRICE) for u in server.stats.usages)
    assert sum(e["usd"] for e in billed) == pytest.approx(server_billed, abs=1e-12)
    assert ledger.total_usd == pytest.approx(server_billed, abs=1e-12)
    opens = {e["id"]: e for e in events if e["ev"] == "open"}
    assert {e["id"] for e in billed} <= set(opens)  # each billed call was opened on disk first
    first = billed[0]
    assert (first["it"], first["model"], first["s"]) == (4, "fake-model", 1)
    assert (opens[first["id"]]["q"], opens[first["id"]]["rollout"], opens[first["id"]]["step"]) == (
        "q7",
        "it0/0/3/1",
        2,
    )
    assert opens[first["id"]]["max_usd"] >= first["usd"]  # the worst case bounds the bill
    failed = [e for e in events if e["ev"] == "failed"]
    assert [e["outcome"] for e in failed] == ["server_error"]
    assert events[0]["ev"] == "session" and events[0]["job"] == "train"
    text = path.read_text()
    assert FAKE_KEY not in text and "spider" not in text  # no key, no prompt


def test_a_resumed_ledger_counts_every_session_and_its_budget_stops_at_once(tmp_path):
    path = tmp_path / JOURNAL_FILE
    first = CostLedger.from_journal(path, job="train", sync=True)
    first.open_call("a", "w", "openai", 0.5, model="m")
    first.record("w", "openai", Usage(100, 10), 0.25, call_id="a", model="m")
    first.start_iteration(1)
    first.record("w", "openai", Usage(1, 1), 0.125)  # a call that was never opened still counts
    first.journal.close()

    resumed = CostLedger.from_journal(path, budget_usd=0.375, job="train", sync=True)
    assert resumed.total_usd == pytest.approx(0.375)
    assert {k: v.calls for k, v in resumed.by("iteration").items()} == {0: 1, 1: 1}
    assert resumed.session == 2
    with pytest.raises(BudgetExceededError):  # a budget just at the spend before the crash: no call starts
        resumed.admit()
    sessions = [e for e in read_events(path) if e["ev"] == "session"]
    assert [(e["session"], e.get("budget_usd")) for e in sessions] == [(1, None), (2, 0.375)]


def test_a_call_open_when_its_session_died_is_lost_at_its_worst_case_once(tmp_path):
    path = tmp_path / JOURNAL_FILE
    crashed = CostLedger.from_journal(path, job="train", sync=True)
    crashed.start_iteration(3)
    crashed.open_call("billed", "w", "anthropic", 0.5)
    crashed.record("w", "anthropic", Usage(1, 1), 0.1, call_id="billed")
    crashed.open_call("in-flight", "w", "anthropic", 0.5, model="claude")
    crashed.open_call("refused", "w", "anthropic", 0.5)
    crashed.close_call("refused", "bad_request")
    crashed.journal.close()  # the process is killed here (the kernel drops its lock): "in-flight" never ends

    resumed = CostLedger.from_journal(path, job="train", sync=True)
    assert resumed.total_usd == pytest.approx(0.6)
    assert resumed.summary()["unsettled"]["cost_usd"] == pytest.approx(0.5)
    lost = [e for e in read_events(path) if e["ev"] == "lost"]
    assert [(e["id"], e["usd"], e["it"], e["model"], e["s"]) for e in lost] == [("in-flight", 0.5, 3, "claude", 2)]
    resumed.journal.close()
    again = CostLedger.from_journal(path, job="train", sync=True)  # the lost event closed it: not twice
    assert again.total_usd == pytest.approx(0.6)


def test_an_outcome_written_before_its_open_is_paired_with_it(tmp_path):
    path = tmp_path / JOURNAL_FILE
    ledger = CostLedger.from_journal(path, job="evaluate", sync=True)
    ledger.start_cell("conductor:untrained/gsm8k")
    ledger.record("w", "sim", Usage(5, 5), 0.2, call_id="x")  # Ray delivered the record first
    ledger.open_call("x", "w", "sim", 1.0, admit=False)
    ledger.journal.close()
    assert CostLedger.from_journal(path, job="evaluate").total_usd == pytest.approx(0.2)
    billed = [e for e in read_events(path) if e["ev"] == "billed"]
    assert billed[0]["cell"] == "conductor:untrained/gsm8k" and "it" not in billed[0]


def test_a_torn_last_line_is_cut_and_a_torn_line_before_others_is_skipped_with_its_offset(tmp_path, caplog):
    path = tmp_path / JOURNAL_FILE
    ledger = CostLedger.from_journal(path, job="train", sync=True)
    ledger.record("w", "sim", Usage(), 0.5)
    ledger.journal.close()
    with open(path, "ab") as f:
        f.write(b'{"ev":"billed","worker":"w","provider":"sim","usd":99')  # the crash tore this write
    assert [e["ev"] for e in read_events(path)] == ["session", "billed"]  # a reader skips it
    resumed = CostLedger.from_journal(path, job="train", sync=True)  # and a writer cuts it
    assert resumed.total_usd == pytest.approx(0.5)
    resumed.journal.close()
    assert all(json.loads(line) for line in path.read_text().splitlines())

    # Torn bytes in the middle, one line glued to the whole event after them, one line of garbage.
    lines = path.read_text().splitlines()
    torn = '{"t":1.0,"ev":"billed","usd":7' + lines[1]
    path.write_text("\n".join([lines[0], torn, "garbage", *lines[2:]]) + "\n")
    skipped: list[int] = []
    events = list(read_events(path, skipped))
    assert [e["ev"] for e in events] == [e["ev"] for e in map(json.loads, lines)]  # no whole event lost
    assert skipped == [len(lines[0]) + 1, len(lines[0]) + 1 + len(torn) + 1]
    assert f"byte offset {skipped[0]}" in caplog.text and "kept the event after them" in caplog.text
    assert CostLedger.from_journal(path, job="train", sync=True).total_usd == pytest.approx(0.5)


def test_a_second_writer_on_the_folder_is_refused_naming_the_first(tmp_path):
    import subprocess
    import sys

    path = tmp_path / JOURNAL_FILE
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from conductor_rl.workers.ledger import CostLedger; "
            f"held = CostLedger.from_journal({str(path)!r}, job='serve', sync=True); print('ready', flush=True); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(JournalLockedError, match=f"process {holder.pid} on .* writes its spend journal"):
            CostLedger.from_journal(path, job="serve", sync=True)
        assert [e["session"] for e in read_events(path) if e["ev"] == "session"] == [1]  # nothing written
    finally:
        holder.communicate("")
    second = CostLedger.from_journal(path, job="serve", sync=True)  # the holder is gone: its lock with it
    assert second.session == 2
    with pytest.raises(JournalLockedError):  # two writers in one process are refused as well
        SpendJournal(path)


class FailingFile:
    """The journal's file as a full disk or an interrupted write leaves it: `script` says, per write,
    "ok", "enospc" (nothing written, ENOSPC) or "short" (half the bytes written)."""

    def __init__(self, real, script: list[str]) -> None:
        self.real, self.script = real, script

    def write(self, data: bytes) -> int:
        what = self.script.pop(0) if self.script else "ok"
        if what == "enospc":
            self.real.write(data[: len(data) // 3])  # a part lands before the disk fills
            raise OSError(28, "No space left on device")
        if what == "short":
            return self.real.write(data[: len(data) // 2])
        return self.real.write(data)

    def __getattr__(self, name):
        return getattr(self.real, name)


@pytest.mark.parametrize("fault", ["enospc", "short"])
def test_a_failed_write_refuses_new_calls_and_loses_no_billed_call(tmp_path, fault, capsys):
    from jobs.spend import main

    path = tmp_path / JOURNAL_FILE
    ledger = CostLedger.from_journal(path, job="train", sync=True)
    ledger.open_call("a", "w", "openai", 0.5)
    ledger.record("w", "openai", Usage(1, 1), 0.25, call_id="a")
    ledger.open_call("b", "w", "openai", 0.5)  # in flight when the disk fills
    script = [fault] if fault == "short" else ["enospc", "enospc"]
    ledger.journal._file = FailingFile(ledger.journal._file, script)
    ledger.record("w", "openai", Usage(1, 1), 0.125, call_id="b")  # billed: kept, never lost
    if fault == "enospc":
        assert isinstance(ledger.journal.failed, JournalWriteError)
        assert ledger.stop_reason == "journal" and ledger.exhausted
        with pytest.raises(ProviderError, match="no new worker call will be sent") as refused:
            ledger.admit()
        assert refused.value.kind == "journal_failed"
        assert all(json.loads(line) for line in path.read_text().splitlines())  # rolled back: no torn line
        ledger.record("w", "openai", Usage(1, 1), 0.0625)  # a call that was in flight, billed meanwhile
    else:  # a short write is finished, not torn
        assert ledger.journal.failed is None
    ledger.journal.close()  # space came back: everything kept is written

    assert main([str(tmp_path), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    expected = 0.25 + 0.125 + (0.0625 if fault == "enospc" else 0)
    assert figures["spent_usd"] == pytest.approx(expected) and figures["open_calls"] == 0
    assert figures["torn_line_offsets"] == []
    assert CostLedger.from_journal(path, job="train", sync=True).total_usd == pytest.approx(expected)


def test_a_journal_deleted_mid_run_is_noticed_and_what_follows_is_kept(tmp_path):
    path = tmp_path / JOURNAL_FILE
    ledger = CostLedger.from_journal(path, job="train", sync=True)
    ledger.record("w", "sim", Usage(), 0.5)
    path.unlink()
    ledger.record("w", "sim", Usage(), 0.25)
    assert "deleted or replaced" in str(ledger.journal.failed) and ledger.stop_reason == "journal"
    assert [e["usd"] for e in read_events(path) if e["ev"] == "billed"] == [0.25]


def test_callers_that_wait_together_share_one_fsync_and_all_land(tmp_path, monkeypatch):
    journal = SpendJournal(tmp_path / JOURNAL_FILE)
    counts = collections.Counter()
    for name in ("_write", "_fsync"):
        real = getattr(journal, name)
        monkeypatch.setattr(journal, name, lambda real=real, name=name: (counts.update([name]), real()))

    async def one(i: int, fsync: bool) -> None:
        journal.add({"ev": "billed", "id": str(i), "worker": "w", "provider": "sim", "usd": 0.001})
        await journal.durable(fsync)

    async def go():
        await asyncio.gather(*(one(i, fsync=True) for i in range(200)))
        assert counts == {"_write": 1, "_fsync": 1}  # one group commit, not one fsync per call
        await asyncio.gather(*(one(i, fsync=False) for i in range(200, 300)))  # opens: written at once
        assert counts == {"_write": 2, "_fsync": 1} and len(list(read_events(journal.path))) == 300
        await asyncio.sleep(FSYNC_WITHIN_S * 3)
        assert counts == {"_write": 2, "_fsync": 2}  # and on disk within FSYNC_WITHIN_S

    asyncio.run(go())


def test_an_unknown_event_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown journal event"):
        SpendJournal(tmp_path / JOURNAL_FILE).add({"ev": "refund"})


def test_spend_command_totals_groups_and_exports_a_crashed_run(tmp_path, capsys):
    import pyarrow.parquet as pq

    from jobs.spend import main

    path = tmp_path / JOURNAL_FILE
    first = CostLedger.from_journal(path, job="train", sync=True)
    first.open_call("a", "solver", "openai", 0.5, model="gpt-x", key=CallKey("q1", "0/0/0/1", 0))
    first.record("solver", "openai", Usage(100, 20), 0.25, call_id="a", model="gpt-x")
    first.start_iteration(1)
    first.open_call("b", "checker", "anthropic", 0.75, model="claude-y")  # cut off by the crash
    first.journal.close()
    second = CostLedger.from_journal(path, job="train", sync=True)
    second.record("solver", "openai", Usage(10, 2), 0.125)
    second.open_call("c", "solver", "openai", 0.5)  # in flight (a run still going)

    assert main([str(tmp_path), "--by", "worker", "--by", "s", "--json", "--csv", str(tmp_path / "c.csv")]) == 0
    printed = capsys.readouterr().out
    figures = json.loads(printed.strip().splitlines()[-1])
    assert figures["spent_usd"] == pytest.approx(0.25 + 0.75 + 0.125)
    assert (figures["billed_calls"], figures["lost_calls"], figures["open_calls"]) == (2, 1, 1)
    assert figures["at_most_usd"] == pytest.approx(1.125 + 0.5)
    by_worker = {r["worker"]: (r["calls"], r["lost"], r["usd"]) for r in figures["by"]["worker"]}
    assert by_worker == {"checker": (1, 1, 0.75), "solver": (2, 0, 0.375)}
    by_session = {r["s"]: r["usd"] for r in figures["by"]["s"]}
    assert by_session == {1: pytest.approx(1.0), 2: pytest.approx(0.125)}  # a lost call is its sender's
    assert "1 call(s) open (in flight, or cut off by a crash)" in printed
    rows = (tmp_path / "c.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 and rows[0].startswith("status,")
    assert any(r.startswith("billed,") and ",q1,0/0/0/1,0," in r for r in rows)

    assert main([str(path), "--parquet", str(tmp_path / "c.parquet")]) == 0
    table = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert sorted(r["status"] for r in table) == ["billed", "billed", "lost", "open"]
    assert "by it:" in capsys.readouterr().out  # a training run: by iteration by default

    with pytest.raises(SystemExit, match="no spend journal"):
        main([str(tmp_path / "elsewhere")])


def test_the_training_report_shows_the_journal_spend_by_worker(tmp_path):
    from conductor_rl.run.report import spend_lines

    assert spend_lines(tmp_path) == []  # no journal, no section
    ledger = CostLedger.from_journal(tmp_path / JOURNAL_FILE, job="train", sync=True)
    ledger.record("solver", "openai", Usage(100, 20), 0.25)
    ledger.open_call("x", "checker", "anthropic", 0.5)
    ledger.journal.close()
    CostLedger.from_journal(tmp_path / JOURNAL_FILE, job="train", sync=True)  # a resume settles x as lost
    text = "\n".join(spend_lines(tmp_path))
    assert "$0.7500 over 1 calls billed and 1 lost" in text and "2 session(s)" in text
    assert "| checker | 1 | 1 | 0 | 0 | 0.5000 |" in text and "| solver | 1 | 0 | 100 | 20 | 0.2500 |" in text


def test_a_served_clients_use_is_streamed_from_a_journal_of_any_length_in_bounded_memory(tmp_path):
    """What a serve restart reads (conductor_rl/serving/access.py): each request and each bill with its
    client, an outcome before its open paired with it, a failed call not charged; a request's client is
    forgotten `horizon_s` after its admission, so a long journal costs the memory of one horizon."""
    import tracemalloc

    from conductor_rl.workers.spend_journal import ClientEvent, client_events

    journal = tmp_path / JOURNAL_FILE

    def line(t, ev, **fields):
        return json.dumps({"t": t, "ev": ev, "s": 1, **fields}) + "\n"

    journal.write_text(
        line(0.0, "request", q="r1", client="alice")
        + line(1.0, "open", id="c1", q="r1", max_usd=1.0)
        + line(2.0, "billed", id="c1", usd=0.25)
        + line(3.0, "lost", id="c2", usd=1.0)  # before its open
        + line(3.5, "open", id="c2", q="r1", max_usd=1.0)
        + line(4.0, "open", id="c3", q="r1", max_usd=1.0)
        + line(5.0, "failed", id="c3", outcome="bad_request")
        + line(6.0, "open", id="c4", q="elsewhere", max_usd=1.0)  # a training call: no client
        + line(7.0, "billed", id="c4", usd=0.5)
        + line(9000.0, "open", id="c5", q="r1", max_usd=1.0)  # hours after r1: not r1's any more
        + line(9001.0, "billed", id="c5", usd=0.5)
    )
    assert list(client_events(journal, horizon_s=3600)) == [
        ClientEvent(0.0, "alice"),
        ClientEvent(2.0, "alice", 0.25),
        ClientEvent(3.0, "alice", 1.0),
    ]

    with journal.open("w") as f:  # six hours of one request a second, each with a billed call
        for i in range(21_600):
            f.write(line(float(i), "request", q=f"r{i}", client=f"client{i % 7}"))
            f.write(line(i + 0.5, "open", id=f"c{i}", q=f"r{i}", max_usd=1.0))
            f.write(line(i + 0.9, "billed", id=f"c{i}", usd=0.001))
    tracemalloc.start()
    spent = sum(e.usd or 0.0 for e in client_events(journal, horizon_s=600))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert spent == pytest.approx(21.6)
    assert peak < 2_000_000, peak  # read whole, the same journal's books hold 65,000 events
