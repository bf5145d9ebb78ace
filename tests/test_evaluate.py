"""End-to-end tests of `conductor-rl evaluate` (jobs/evaluate.py) and `conductor-rl data mix` (jobs/data.py).

Real components throughout: the session's local Ray cluster (tests/conftest.py), the vLLM
generator with the tiny-qwen2 Conductor, the worker pools with the simulated workers of the
embedded default (configs/local.yaml), the grader pool and its sandbox (HumanEval answers are
run against their tests). A run's start (the generator above all) is most of its time, so
runs are shared by module fixtures:

- `straight`: every method (the untrained Conductor and every baseline, the router with its
  own pilot pass) on two small benchmarks, in one go: the reference;
- `resumed`: the same evaluation by `python -m jobs.evaluate` in a subprocess (its own local
  Ray), SIGKILLed as soon as records.jsonl holds a complete line (or, in a second run, a
  Conductor record), then continued by `evaluate()` in this process: it must give the
  straight run's table, cell for cell.

Bad input must fail before Ray or any actor starts, in one line naming the value and what is
allowed; a budget stops an evaluation with what finished written, and a rerun with more
budget completes it to the table of an unbudgeted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conductor_rl.config import load_config
from conductor_rl.data import load_dataset
from conductor_rl.evaluation.methods import KINDS
from conductor_rl.workers.spend_journal import JOURNAL_FILE, read_books

REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 900  # not a speed check: on a loaded 2-core machine a run can take minutes
pytestmark = pytest.mark.timeout(2 * HANG_GUARD_S)

WORKERS = [w.name for w in load_config(None).workers]
LIMIT, REPEATS = 3, 2
HUMANEVAL_QUESTIONS = 2  # evaluate.limit is one for all benchmarks: HumanEval's two are a file of their own
METHODS = ["conductor:untrained", "single:*", "reflect:*:1", "moa", "router", "random", "oracle"]
EXPANDED = (
    ["conductor:untrained"]
    + [f"single:{w}" for w in WORKERS]
    + [f"reflect:{w}:1" for w in WORKERS]
    + ["moa", "router", "random", "oracle"]
)
FAST = [
    "conductor.model=tiny-qwen2",
    "cluster.generator={CPU: 1}",
    "conductor.max_new_tokens=64",
    "evaluate.router_pilot_questions=20",
    "evaluate.progress=false",
    f"evaluate.repeats={REPEATS}",
    f"evaluate.limit={LIMIT}",
]
# What a cell must agree on between a resumed and an uninterrupted run (neither wall times nor spent_usd).
COMPARED = (
    "questions",
    "repeats",
    "samples",
    "accuracy",
    "stderr",
    "calls",
    "steps",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "cost_total_usd",
    "errors",
    "plan_errors",
    "simulated",
)


def flow(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def overrides(out: Path, benchmarks: list[str], methods: list[str] = METHODS, *extra: str) -> list[str]:
    return [
        *FAST,
        f"evaluate.benchmarks={flow(benchmarks)}",
        f"evaluate.methods={flow(methods)}",
        f"evaluate.output_dir={out}",
        *extra,
    ]


def subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own local cluster, never ours
    env.update(RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def cells_of(out: Path) -> dict[tuple[str, str], dict]:
    return {(c["method"], c["benchmark"]): c for c in results(out)["cells"]}


def complete_lines(path: Path) -> list[dict]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].split(b"\n") if line.strip()]


def accuracy_table(out: Path) -> str:
    text = (out / "results.md").read_text()
    return text.split("## Accuracy", 1)[1].split("## Cost", 1)[0]


def assert_same_cells(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want), f"cells differ: {sorted(set(got) ^ set(want))}"
    for key in want:
        for name in COMPARED:
            a, b = got[key][name], want[key][name]
            same = a == b if not isinstance(b, float) else a == pytest.approx(b, rel=1e-12, abs=1e-15)
            assert same, f"{key}: {name} is {a!r}, uninterrupted {b!r}"


# ---------------------------------------------------------------- bad input fails before Ray or any actor


def refused(argv: list[str], out: Path) -> str:
    """`conductor-rl evaluate ARGV --output OUT`'s exit message; nothing may be written."""
    from jobs.evaluate import main

    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--output", str(out), "evaluate.progress=false"])
    message = exit_info.value.code
    assert isinstance(message, str) and message.startswith("error: "), f"a clean error, got {message!r}"
    assert "\n" not in message, f"the message must be one line:\n{message}"
    assert "Traceback" not in message
    assert not out.exists(), f"{out} was written for a refused evaluation"
    return message


def have(spec: str) -> list:
    try:
        return load_dataset(spec)
    except (FileNotFoundError, RuntimeError) as err:
        pytest.skip(f"{spec} is not on this machine: {err}")


def shared_count(training: str, benchmark: str) -> tuple[int, int]:
    """(benchmark questions that the training data holds, benchmark questions)."""
    from conductor_rl.data.overlap import find_overlap

    questions = have(benchmark)
    return len({e.id for _, e in find_overlap(load_dataset(training), questions)}), len(questions)


def test_an_unknown_benchmark_is_refused_listing_the_allowed_forms(tmp_path, no_cluster):
    message = refused(["--benchmark", "nosuchbench", "--method", "single:*"], tmp_path / "out")
    assert "'nosuchbench'" in message and "unknown dataset" in message, message
    assert "Allowed forms" in message and "samples:<name>" in message and "mixture:<path>" in message, message


def test_an_unknown_method_is_refused_listing_the_methods(tmp_path, no_cluster):
    message = refused(["--benchmark", "samples:math500", "--method", "frobnicate"], tmp_path / "out")
    assert "'frobnicate'" in message, message
    for allowed in ("conductor:untrained", "single:<worker>", "reflect:<worker>", *KINDS[KINDS.index("moa") :]):
        assert allowed in message, f"{allowed!r} missing from: {message}"


def test_the_papers_setting_refuses_to_grade_code_without_isolation(tmp_path, no_cluster, monkeypatch):
    """configs/paper.yaml requires bubblewrap: where it cannot isolate, evaluate stops before Ray
    starts, naming the key and the fix, instead of grading untrusted code with rlimits alone."""
    import conductor_rl.grading.sandbox as sandbox

    for name in ("OPENAI_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, "sk-test")
    monkeypatch.setattr(sandbox, "detect_isolation", lambda _path: ("rlimits", [], "bubblewrap is not installed"))
    argv = ["--config", "configs/paper.yaml", "--benchmark", "samples:humaneval", "--method", "single:gpt-6.1-sol"]
    message = refused(argv, tmp_path / "out")
    assert "sandbox isolation is required (grader.sandbox.require_isolation)" in message, message
    assert "apt-get install bubblewrap" in message, message


def test_the_optimal_plan_of_a_pool_with_real_workers_is_refused(tmp_path, no_cluster):
    argv = ["--config", "configs/paper.yaml", "--benchmark", "samples:math500", "--method", "optimal"]
    message = refused(argv, tmp_path / "out")
    assert "'optimal' needs a pool of simulated workers" in message and "gpt-6.1-sol" in message, message
    assert "drop optimal from evaluate.methods" in message, message


def test_a_single_method_of_an_unknown_worker_is_refused_naming_the_workers(tmp_path, no_cluster):
    message = refused(["--benchmark", "samples:math500", "--method", "single:gpt-9"], tmp_path / "out")
    assert "'gpt-9'" in message and all(w in message for w in WORKERS), message


def test_a_conductor_folder_that_holds_no_model_is_refused_saying_what_a_model_folder_is(tmp_path, no_cluster):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "notes.txt").write_text("no weights here")
    message = refused(["--benchmark", "samples:math500", "--method", f"conductor:{folder}"], tmp_path / "out")
    assert str(folder) in message and "holds no model" in message, message
    assert "config.json" in message and "*.safetensors" in message and "checkpoints/ckpt-" in message, message


def test_a_benchmark_empty_after_filtering_is_refused(tmp_path, no_cluster):
    fixture = REPO / "tests" / "fixtures" / "livecodebench" / "test.jsonl"
    assert load_dataset(f"livecodebench@{fixture}"), "the fixture itself holds problems"
    spec = f"livecodebench:2030-01-01..2030-12-31@{fixture}"
    message = refused(["--benchmark", spec, "--method", "single:*"], tmp_path / "out")
    assert repr(spec) in message and "no questions after filtering" in message, message
    assert "another window or split" in message, message


def test_the_router_pilot_may_not_train_on_a_benchmark_question(tmp_path, no_cluster):
    shared, total = shared_count("samples:gsm8k", "gsm8k:train")
    assert shared > 0
    message = refused(
        ["--benchmark", "gsm8k:train", "--method", "router", "data.questions=samples:gsm8k"], tmp_path / "out"
    )
    assert f"'gsm8k:train' shares {shared:,} of its {total:,} questions" in message, message
    assert "the router's pilot" in message and "disjoint" in message, message


def weightless_checkpoint(run: Path, trained) -> Path:
    """A checkpoint folder whose state.json holds `trained`, the configuration it was trained with. (The model
    folder has tiny-qwen2's configuration and tokenizer, which evaluate loads first, and no weights.)"""
    import shutil

    from conductor_rl.models import resolve_model

    checkpoint = run / "checkpoints" / "ckpt-000001"
    (checkpoint / "model").mkdir(parents=True)
    (checkpoint / "state.json").write_text(json.dumps({"iteration": 1, "config": trained.model_dump(mode="json")}))
    for file in Path(resolve_model("tiny-qwen2")).iterdir():
        if file.suffix != ".safetensors":
            shutil.copy(file, checkpoint / "model" / file.name)
    (checkpoint / "model" / "model.safetensors").write_bytes(b"")
    return checkpoint


def test_a_checkpoint_is_evaluated_on_a_subset_of_its_pool_but_not_on_another_pool(tmp_path, no_cluster):
    """Adaptive pools: `--workers` may pick any part of the pool a Conductor was trained with."""
    from jobs.evaluate import main

    trained = load_config(None, ["conductor.model=tiny-qwen2"])
    mine = weightless_checkpoint(tmp_path / "mine", trained)
    argv = [
        "--benchmark",
        "humaneval",
        "--method",
        f"conductor:{mine}",
        "--output",
        str(tmp_path / "out"),
        "evaluate.progress=false",
        "evaluate.preflight=false",
        "--workers",
        WORKERS[2],
    ]
    with pytest.raises(AssertionError, match="went on to start Ray"):  # accepted: it got as far as Ray
        main(argv)
    renamed = trained.model_copy(
        update={"workers": [w.model_copy(update={"name": f"other-{i}"}) for i, w in enumerate(trained.workers)]}
    )
    other = weightless_checkpoint(tmp_path / "other", renamed)
    message = refused(
        ["--benchmark", "humaneval", "--method", f"conductor:{other}", "--workers", WORKERS[2]], tmp_path / "out2"
    )
    assert "trained with 3 workers (['other-0', 'other-1', 'other-2'])" in message, message
    assert "or on a subset of it (--workers)" in message, message


def test_a_checkpoint_is_not_evaluated_on_its_own_training_data(tmp_path, no_cluster):
    """A checkpoint folder's state.json holds the configuration it was trained with. (The model folder
    has tiny-qwen2's configuration and tokenizer, which evaluate loads first, and no weights.)"""
    checkpoint = weightless_checkpoint(
        tmp_path / "run", load_config(None, ["data.questions=samples:mmlu", "conductor.model=tiny-qwen2"])
    )
    shared, total = shared_count("samples:mmlu", "mmlu:train")
    assert shared > 0
    for named in (checkpoint, tmp_path / "run"):  # the checkpoint folder, and the run folder holding it
        message = refused(["--benchmark", "mmlu:train", "--method", f"conductor:{named}"], tmp_path / "out")
        assert f"'mmlu:train' shares {shared:,} of its {total:,} questions" in message, message
        assert f"samples:mmlu (training data of conductor:{named})" in message, message


def test_training_on_an_evaluation_benchmark_is_refused_before_ray(tmp_path, no_cluster):
    from jobs.train import main

    # The embedded default evaluates on the held-out quarter of the shipped samples; all of a sample set overlaps it.
    assert "samples:math500:eval" in load_config(None).evaluate.benchmarks
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["data.questions=samples:math500", f"train.output_dir={out}", "train.progress=false"])
    message = exit_info.value.code
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    assert "'samples:math500:eval' shares 10 of its 10 questions" in message, message
    assert "data.questions=samples:math500" in message and "samples:math500:train" in message, message
    assert not (out / "metrics.jsonl").exists() and not (out / "config.json").exists()


# ---------------------------------------------------------------- one evaluation of every method


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("evaluate")


@pytest.fixture(scope="module")
def benchmarks(root) -> list[str]:
    """samples:math500:eval (LIMIT questions: the embedded default trains on samples:math500:train) and the
    first HUMANEVAL_QUESTIONS of samples:humaneval."""
    file = root / "humaneval.jsonl"
    questions = load_dataset("samples:humaneval", limit=HUMANEVAL_QUESTIONS)
    file.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in questions))
    return ["samples:math500:eval", f"jsonl:{file}"]


def questions_of(benchmarks: list[str]) -> dict[str, list[str]]:
    return {b: [q.id for q in load_dataset(b, limit=LIMIT)] for b in benchmarks}


@pytest.fixture(scope="module")
def straight(ray_cluster, root, benchmarks):
    from jobs.evaluate import evaluate

    out = root / "straight"
    started = time.perf_counter()
    summary = evaluate(load_config(None, overrides(out, benchmarks)))
    return SimpleNamespace(out=out, summary=summary, seconds=time.perf_counter() - started)


def test_every_method_has_a_cell_on_every_benchmark_with_accuracy_and_standard_error(straight, benchmarks):
    import pyarrow.parquet as pq

    print(f"straight run: {straight.seconds:.0f} s")
    assert straight.summary["stopped"] == "finished", straight.summary
    assert straight.summary["methods"] == EXPANDED
    cells = cells_of(straight.out)
    assert sorted(cells) == sorted((m, b) for m in EXPANDED for b in benchmarks)
    for key, cell in cells.items():
        assert cell["accuracy"] is not None and 0.0 <= cell["accuracy"] <= 1.0, (key, cell)
        assert cell["stderr"] is not None and cell["stderr"] >= 0.0, (key, cell)
        assert cell["errors"] == 0, (key, cell)
    ids = questions_of(benchmarks)
    assert [len(ids[b]) for b in benchmarks] == [LIMIT, HUMANEVAL_QUESTIONS]
    rows = pq.read_table(straight.out / "records.parquet").to_pylist()
    assert len(rows) == len(EXPANDED) * sum(map(len, ids.values())) * REPEATS, "methods x questions x repeats"
    keys = {(r["method"], r["benchmark"], r["question_id"], r["repeat"]) for r in rows}
    assert keys == {(m, b, q, r) for m in EXPANDED for b in benchmarks for q in ids[b] for r in range(REPEATS)}
    assert "pilot" not in {r["benchmark"] for r in rows}, "the router's pilot is not a benchmark"
    # The pilot ran (every worker over the training questions, evaluate.router_pilot_repeats times) and is
    # kept for a resumed run.
    pilot = [r for r in complete_lines(straight.out / "records.jsonl") if r["benchmark"] == "pilot"]
    pilot_repeats = load_config(None).evaluate.router_pilot_repeats
    training = load_dataset(load_config(None).data.questions, limit=20)  # the pilot's questions
    assert len(pilot) == len(WORKERS) * len(training) * pilot_repeats
    assert {r["repeat"] for r in pilot} == set(range(pilot_repeats))
    plot = straight.out / "accuracy_vs_cost.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_results_md_holds_the_table_of_every_method_and_the_conductor_strategy(straight, benchmarks):
    text = (straight.out / "results.md").read_text()
    table = accuracy_table(straight.out)
    header = next(line for line in table.splitlines() if line.startswith("| method |"))
    assert header.split(" | ")[1:-1] == benchmarks and header.endswith("| mean |"), header
    for method in EXPANDED:
        assert f"\n| {method} | " in table, f"no row for {method} in the accuracy table:\n{table}"
    assert "## Conductor strategy" in text
    strategy = results(straight.out)["strategy"]
    assert strategy and {s["method"] for s in strategy} == {"conductor:untrained"}, strategy
    assert {s["domain"] for s in strategy} <= {"math", "code"} and all(s["plans"] >= 1 for s in strategy)
    for row in strategy:
        assert set(row["worker_shares"]) <= set(WORKERS) and sum(row["worker_shares"].values()) == pytest.approx(1)


def test_the_oracle_is_the_best_single_worker_of_each_question(straight, benchmarks):
    """It picks, per question, the worker whose single runs were most often correct, and runs that
    worker with the same requests and draws: its per-question accuracy is the best single one's."""
    import pyarrow.parquet as pq

    cells = cells_of(straight.out)
    for benchmark in benchmarks:
        oracle = cells[("oracle", benchmark)]["accuracy"]
        for worker in WORKERS:
            assert oracle >= cells[(f"single:{worker}", benchmark)]["accuracy"], (benchmark, worker)
    per_question: dict[tuple[str, str, str], list[bool]] = {}
    for r in pq.read_table(straight.out / "records.parquet").to_pylist():
        per_question.setdefault((r["method"], r["benchmark"], r["question_id"]), []).append(r["verdict"] == "correct")
    share = {k: sum(v) / len(v) for k, v in per_question.items()}
    for (method, benchmark, qid), value in share.items():
        if method == "oracle":
            best = max(share[(f"single:{w}", benchmark, qid)] for w in WORKERS)
            assert value == best, f"oracle on {qid}: {value}, the best single worker {best}"


def test_baselines_make_the_calls_their_shape_says_and_samples_are_labelled_simulated(straight, benchmarks):
    import pyarrow.parquet as pq

    rows = pq.read_table(straight.out / "records.parquet").to_pylist()
    for r in rows:
        if r["method"].startswith("reflect:"):
            worker = r["method"].split(":")[1]
            assert r["calls"] == 2 and r["steps"] == 2 and r["workers"] == [worker, worker], r
        elif r["method"] == "moa":
            assert r["calls"] == len(WORKERS) + 1 == r["steps"], r  # one layer of proposers, one aggregator
            assert r["workers"][-1] == "sim-knowledge-expert", "the aggregator: the highest output price"
        elif r["method"].startswith("single:") or r["method"] in ("router", "oracle"):
            assert r["calls"] == 1 and len(r["workers"]) == 1, r
        if r["method"].startswith("single:"):
            assert r["workers"] == [r["method"].split(":", 1)[1]]
        if r["calls"]:
            assert r["simulated"], f"a sample of simulated workers must say so: {r}"
    # The Conductor's plans are sampled, parsed and run: most parse, each within conductor.max_steps.
    conductor = [r for r in rows if r["method"] == "conductor:untrained"]
    planned = [r for r in conductor if r["verdict"] != "plan_error"]
    assert len(planned) >= len(conductor) // 2, [r["error"] for r in conductor]
    assert all(1 <= r["steps"] <= load_config(None).conductor.max_steps for r in planned)
    assert all(r["calls"] == r["steps"] for r in planned), "without recursion a plan makes one call a step"
    # HumanEval answers are graded by running their tests: both verdicts occur, none is an error.
    code = [r for r in rows if r["benchmark"] == benchmarks[1]]
    assert {r["verdict"] for r in code} >= {"correct", "wrong"} and "error" not in {r["verdict"] for r in code}
    assert all(r["domain"] == "code" for r in code)
    summary = results(straight.out)
    assert summary["simulated"] is True and summary["info"]["simulated_workers"] == WORKERS
    assert "**Simulated workers**" in (straight.out / "results.md").read_text()
    # The budget setting it ran under: the embedded pool follows neither of the paper's.
    assert (
        summary["info"]["budgets"] == "custom" and "> **Budgets**: custom" in (straight.out / "results.md").read_text()
    )
    assert [w["max_tokens"] for w in summary["info"]["workers"]] == [w.max_tokens for w in load_config(None).workers]
    assert summary["info"]["moa_aggregator"] == "sim-knowledge-expert"


# ---------------------------------------------------------------- resumed after a kill


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the process group, then whatever else runs in the subprocess's session (Ray puts its
    actors in process groups of their own); only processes this test started."""
    import psutil

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    left = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == proc.pid and process.pid != os.getpid():
                process.kill()
                left.append(process)
        except (OSError, psutil.Error):
            continue
    psutil.wait_procs(left, timeout=10)


# When the subprocess is killed: as soon as records.jsonl holds a Conductor record (its first benchmark's
# batch, sampled by the subprocess's vLLM engine; the resumed run samples the second benchmark's in another
# process). The router's pilot pass runs first, so its records are kept too. (A kill at the very first
# record resumed the same way and cost the suite another whole evaluation.)
KILL_POINTS = {
    "first-conductor-batch": lambda records: any(r["method"].startswith("conductor:") for r in records),
}


def run_and_kill(out: Path, benchmarks: list[str], kill_point: str) -> SimpleNamespace:
    """`python -m jobs.evaluate` with the straight run's settings, SIGKILLed at `kill_point`."""
    records = out / "records.jsonl"
    stderr = out.with_name(out.name + ".stderr")
    err = stderr.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.evaluate", *overrides(out, benchmarks)],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=err,
        start_new_session=True,
    )
    started = time.monotonic()
    try:
        while not KILL_POINTS[kill_point](complete_lines(records)):
            if proc.poll() is not None or time.monotonic() - started > HANG_GUARD_S:
                pytest.fail(f"{kill_point} not reached before exit {proc.poll()}:\n{stderr.read_text()[-4000:]}")
            time.sleep(0.05)
    finally:
        kill_session(proc)
        err.close()
    return SimpleNamespace(
        out=out, at_kill=complete_lines(records), returncode=proc.returncode, seconds=time.monotonic() - started
    )


@pytest.fixture(scope="module", params=list(KILL_POINTS))
def resumed(request, ray_cluster, root, benchmarks):
    """A killed evaluation's folder, continued by `evaluate()` in this process."""
    from jobs.evaluate import evaluate

    killed = run_and_kill(root / f"killed-{request.param}", benchmarks, request.param)
    assert not (killed.out / "results.json").exists(), "the kill came after the end"
    started = time.perf_counter()
    summary = evaluate(load_config(None, overrides(killed.out, benchmarks)))
    return SimpleNamespace(out=killed.out, killed=killed, summary=summary, seconds=time.perf_counter() - started)


def test_an_evaluation_killed_and_resumed_gives_the_uninterrupted_table(straight, resumed):
    killed = resumed.killed
    print(f"killed after {killed.seconds:.0f} s at {len(killed.at_kill)} records; resumed in {resumed.seconds:.0f} s")
    assert killed.returncode == -signal.SIGKILL
    assert resumed.summary["stopped"] == "finished", resumed.summary
    after = complete_lines(resumed.out / "records.jsonl")
    assert after[: len(killed.at_kill)] == killed.at_kill, "what was recorded before the kill is kept"
    keys = [(r["method"], r["benchmark"], r["question_id"], r["repeat"]) for r in after]
    assert len(keys) == len(set(keys)), "a sample recorded before the kill was run again"
    assert len(after) == len(complete_lines(straight.out / "records.jsonl")) > len(killed.at_kill)
    assert_same_cells(cells_of(resumed.out), cells_of(straight.out))
    # The books: both sessions, every call of the killed one (those it cut off at their worst case).
    books = read_books(resumed.out / JOURNAL_FILE)
    assert [s["session"] for s in books.sessions] == [1, 2] and not books.open
    assert books.spent_usd == pytest.approx(resumed.summary["spent_total_usd"], abs=1e-12)
    assert resumed.summary["spent_usd"] < resumed.summary["spent_total_usd"]  # this invocation's part
    assert {e["s"] for e in books.billed} == {1, 2}
    assert results(resumed.out)["strategy"] == results(straight.out)["strategy"]
    assert accuracy_table(resumed.out) == accuracy_table(straight.out)


# ---------------------------------------------------------------- budget

BASELINES = ["single:*", "reflect:*:1", "moa", "random", "oracle"]


def run_main(out: Path, benchmarks: list[str], *extra: str) -> int:
    from jobs.evaluate import main

    return main(["--json", *overrides(out, benchmarks, BASELINES), *extra])


@pytest.fixture(scope="module")
def cached_run(ray_cluster, root, benchmarks) -> SimpleNamespace:
    """The baselines, unbudgeted, with an empty response cache: the cache's first run (every call a miss,
    paid and stored) and the table a budgeted run must complete to."""
    import contextlib
    import io

    cache, out = root / "response-cache", root / "cached-1"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = run_main(out, benchmarks, f"workflow.response_cache={cache}")
    summary = json.loads(printed.getvalue().strip().splitlines()[-1])
    return SimpleNamespace(out=out, cache=cache, code=code, summary=summary)


def test_a_spent_budget_stops_with_what_finished_and_a_larger_one_completes_the_table(
    root, benchmarks, cached_run, capsys
):
    out, reference = root / "budget", cached_run.out  # the unbudgeted table: the cache's first run's
    started = time.perf_counter()
    # $0.02 is below even the low cost forecast: refused before anything starts, unless forced.
    with pytest.raises(SystemExit, match="would cost at least"):
        run_main(out, benchmarks, "--budget-usd", "0.02")
    assert run_main(out, benchmarks, "--budget-usd", "0.02", "--force") == 1
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["stopped"] == "budget" and summary["spent_usd"] >= 0.02, summary
    assert summary["forecast"]["usd"][0] > 0.02
    books = read_books(out / JOURNAL_FILE)
    assert books.spent_usd == pytest.approx(summary["spent_usd"], abs=1e-12) and not books.open
    assert {e["cell"].split("/")[0] for e in books.billed} <= set(BASELINES + EXPANDED)
    first = complete_lines(out / "records.jsonl")
    methods = [m for m in EXPANDED if not m.startswith("conductor:") and m != "router"]
    full = len(methods) * (LIMIT + HUMANEVAL_QUESTIONS) * REPEATS
    assert 0 < len(first) < full, f"{len(first)} of {full} samples before the budget stopped it"
    written = results(out)
    assert written["info"]["stopped"] == "budget"
    assert sum(c["samples"] + c["errors"] for c in written["cells"]) == len(first), "the table of what finished"
    import pyarrow.parquet as pq

    assert pq.read_table(out / "records.parquet").num_rows == len(first) and (out / "results.md").is_file()

    # The same budget again: the journal holds what the first invocation spent, so no call starts.
    assert run_main(out, benchmarks, "--budget-usd", "0.02") == 1
    assert len(read_books(out / JOURNAL_FILE).billed) == len(books.billed)
    assert complete_lines(out / "records.jsonl") == first
    assert run_main(out, benchmarks, "--budget-usd", "10") == 0
    finished = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert finished["stopped"] == "finished"
    assert finished["spent_total_usd"] == pytest.approx(read_books(out / JOURNAL_FILE).spent_usd, abs=1e-12)
    assert finished["spent_usd"] == pytest.approx(finished["spent_total_usd"] - books.spent_usd, abs=1e-12)
    assert [(e["session"], e["job"]) for e in read_books(out / JOURNAL_FILE).sessions] == [
        (1, "evaluate"),
        (2, "evaluate"),
        (3, "evaluate"),
    ]
    after = complete_lines(out / "records.jsonl")
    assert after[: len(first)] == first and len(after) == full
    assert cached_run.code == 0
    assert_same_cells(cells_of(out), cells_of(reference))
    assert accuracy_table(out) == accuracy_table(reference)
    print(f"budget: two baseline runs in {time.perf_counter() - started:.0f} s")


def test_with_the_response_cache_a_second_evaluation_costs_nothing_and_prices_the_same_table(
    root, benchmarks, cached_run, capsys
):
    cache = cached_run.cache
    first, second = cached_run.out, root / "cached-2"
    assert cached_run.code == 0
    spent_first = cached_run.summary["spent_usd"]
    assert spent_first > 0
    assert run_main(second, benchmarks, f"workflow.response_cache={cache}") == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["spent_usd"] == 0.0, "every call of the second run must come from the cache"
    # The table prices calls at list price: a cached answer costs the method what it would cost.
    assert_same_cells(cells_of(second), cells_of(first))
    assert all(c["cost_usd"] > 0 for c in results(second)["cells"])
    # Repeats are separate draws, each with its own cache namespace.
    assert sorted(p.name for p in cache.iterdir()) == [f"repeat-{r}" for r in range(REPEATS)]


# ---------------------------------------------------------------- conductor-rl data mix

# MMLU as the paper: its auxiliary_train split, which is not here (no Hub): its offline fallback is used, named.
MIX_SOURCES = ["math:train", "mmlu:auxiliary_train|mmlu:train", "rlpr:train"]


def loads(spec: str) -> bool:
    try:
        load_dataset(spec, limit=1)
        return True
    except (FileNotFoundError, RuntimeError, ValueError):
        return False


def test_data_mix_pilots_every_answering_worker_and_never_the_conductors_seat(tmp_path, monkeypatch):
    """configs/paper-recursion.yaml's pool holds the Conductor's seat: the pilot runs single:<worker> for
    the workers that answer, each by its place in the pool (here the seat is first)."""
    import jobs.data as jd

    seen = []

    def stop_at_the_pilot(ev, out):
        seen.extend(ev.methods)
        return "stopped", 0.0, None

    monkeypatch.setattr(jd, "run_evaluation", stop_at_the_pilot)
    sim = {"accuracy": {"default": 0.5}}
    pool = [{"name": "conductor", "provider": "conductor"}] + [{"name": w, "provider": "sim", "sim": sim} for w in "ab"]
    (tmp_path / "seated.yaml").write_text(json.dumps({"workers": pool}))
    argv = ["mix", "--config", str(tmp_path / "seated.yaml"), 'mix.sources=["samples:gsm8k"]']
    argv += [f"mix.output={tmp_path / 'm.parquet'}", "evaluate.benchmarks=[]"]
    with pytest.raises(SystemExit, match="stopped"):
        jd.main(argv)
    assert [(m.name, m.worker) for m in seen] == [("single:a", 1), ("single:b", 2)]


def test_data_mix_picks_informative_questions_by_a_pilot_that_a_second_run_reuses(
    ray_cluster, tmp_path, monkeypatch, capsys
):
    import pyarrow.parquet as pq

    import jobs.data as jd
    from conductor_rl.data.overlap import text_key

    for spec in MIX_SOURCES[:2]:
        have(spec)
    spent: list[float] = []
    run_evaluation = jd.run_evaluation

    def recording(ev, out):  # the real pilot pass; what its workers spent is kept for the test
        how, usd, store = run_evaluation(ev, out)
        spent.append(usd)
        return how, usd, store

    monkeypatch.setattr(jd, "run_evaluation", recording)
    output = tmp_path / "m.parquet"
    argv = [
        "mix",
        f"mix.sources={flow(MIX_SOURCES)}",
        "mix.candidates_per_source=30",
        "mix.total=20",
        f"mix.output={output}",
        "--json",
        "evaluate.progress=false",
    ]
    started = time.perf_counter()
    assert jd.main(argv) == 0
    first_s = time.perf_counter() - started
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    missing = [s for s in MIX_SOURCES if not loads(s)]
    used = [s.split("|")[-1] for s in MIX_SOURCES if s not in missing]
    assert summary["skipped_sources"] == missing and summary["sources"] == used
    assert summary["fallback_sources"] == {"mmlu:auxiliary_train|mmlu:train": "mmlu:train"}
    assert "mmlu:auxiliary_train is not available here: using its offline fallback mmlu:train" in captured.err
    if not loads("rlpr:train"):
        assert missing == ["rlpr:train"]
    assert summary["candidates"] == dict.fromkeys(summary["sources"], 30)

    table = pq.read_table(output)
    rows = table.to_pylist()
    pilot_columns = [f"pilot_{w}" for w in WORKERS]
    assert set(pilot_columns) <= set(table.column_names)
    assert 0 < len(rows) <= 20 and summary["report"]["questions"] == len(rows)
    # The pilot's own records say who solved what: every row was solved by some but not all workers.
    pilot = complete_lines(Path(f"{output}.pilot") / "records.jsonl")
    assert len(pilot) == len(WORKERS) * sum(summary["candidates"].values())
    solved = {(r["question_id"], r["method"].split(":", 1)[1]): r["verdict"] == "correct" for r in pilot}
    for row in rows:
        flags = [row[c] for c in pilot_columns]
        assert 0 < sum(flags) < len(WORKERS) and row["pilot_solved"] == sum(flags), row
        assert flags == [solved[(row["id"], w)] for w in WORKERS], row["id"]
    informative = {q for q, _ in solved if 0 < sum(solved[(q, w)] for w in WORKERS) < len(WORKERS)}
    assert len(rows) == min(20, len(informative)), "fewer than the total only when too few qualify"
    held_out = {text_key(q.question) for spec in ("math500", "mmlu:eval") for q in load_dataset(spec)}
    assert not {text_key(r["question"]) for r in rows} & held_out, "a mixture never holds an evaluation question"

    mixture = load_dataset(f"mixture:{output}")
    assert [q.id for q in mixture] == [r["id"] for r in rows]
    assert {q.domain for q in mixture} == {"math", "mmlu"}

    pilot_bytes = (Path(f"{output}.pilot") / "records.jsonl").read_bytes()
    started = time.perf_counter()
    assert jd.main(argv) == 0
    second_s = time.perf_counter() - started
    capsys.readouterr()
    assert spent[0] > 0 and spent[1] == 0.0, f"the second run must reuse the pilot, not pay again: {spent}"
    assert (Path(f"{output}.pilot") / "records.jsonl").read_bytes() == pilot_bytes
    assert [q.id for q in load_dataset(f"mixture:{output}")] == [q.id for q in mixture]
    print(f"data mix: {first_s:.0f} s, again {second_s:.0f} s")


# ---------------------------------------------------------------- the recursive Conductor at test time


def test_a_depth_is_a_limit_calls_are_made_only_by_steps_given_to_the_seat_and_counted(ray_cluster, tmp_path):
    """conductor:untrained@depth=1 on a pool with the Conductor's seat: nothing forces a call; a
    root step given to the seat is a recursive call, sampled by the method's vLLM generator (empty
    plans allowed there), whose plan's worker calls count in the records; a depth-1 step given to
    the seat is at the limit and keeps the answer (no call)."""
    from conductor_rl.evaluation import RecordStore
    from jobs.evaluate import evaluate

    out = tmp_path / "out"
    method = "conductor:untrained@depth=1"
    # The embedded default's 96 tokens: with FAST's 64, a three-step plan can be cut off (a plan error).
    settings = overrides(out, ["samples:math500:eval"], [method], "evaluate.repeats=2", "evaluate.limit=4")
    seat = len(load_config(None, settings).workers)
    summary = evaluate(
        load_config(
            None, settings + ["conductor.max_new_tokens=96", f"workers.{seat}={{name: conductor, provider: conductor}}"]
        )
    )
    assert summary["stopped"] == "finished", summary
    records = RecordStore(out).records()
    assert len(records) == 4 * 2 and {r.method for r in records} == {method}
    assert all(r.verdict != "error" and r.error is None for r in records)
    for r in records:
        seat_steps = sum(step["model_id"] == seat for step in r.plan)
        assert r.recursive_calls == seat_steps  # one call per root step given to the seat, none forced
        assert r.verdict == "plan_error" or r.calls >= r.steps - seat_steps  # the root's worker calls, and more
        assert r.calls_on_right + r.calls_on_wrong <= r.recursive_calls
