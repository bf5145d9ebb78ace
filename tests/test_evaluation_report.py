"""The evaluation's result files, and its resumable record store."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from conductor_rl.evaluation import (
    EvalRecord,
    RecordStore,
    ResumeMismatchError,
    StoreError,
    markdown_table,
    strategy,
    summarise,
    write_results,
)


def rec(method: str, benchmark: str, question: str, repeat: int, verdict: str, **fields) -> EvalRecord:
    return EvalRecord(method, benchmark, question, "mmlu" if benchmark == "mmlu" else "math", repeat, verdict, **fields)


RECORDS = [
    rec(
        "conductor:run",
        "math500",
        "q1",
        0,
        "correct",
        steps=2,
        calls=2,
        workers=("a", "b"),
        cost_usd=0.02,
        input_tokens=300,
        output_tokens=50,
        plan=(
            {"model_id": 0, "worker": "a", "subtask": "s", "access": []},
            {"model_id": 1, "worker": "b", "subtask": "t", "access": "all"},
        ),
    ),
    rec("conductor:run", "math500", "q2", 0, "wrong", steps=1, calls=1, workers=("a",), cost_usd=0.01),
    rec("conductor:run", "mmlu", "q3", 0, "correct", steps=1, calls=1, workers=("b",), cost_usd=0.01),
    rec(
        "single:a",
        "math500",
        "q1",
        0,
        "correct",
        steps=1,
        calls=1,
        workers=("a",),
        cost_usd=0.001,
        final_answer="\\boxed{3}",
    ),
    rec("single:a", "math500", "q2", 0, "error", error="step 0: timeout"),
    rec("single:a", "mmlu", "q3", 0, "wrong", steps=1, calls=1, workers=("a",), cost_usd=0.001, simulated=True),
]


def test_markdown_table_has_methods_in_rows_and_benchmarks_in_columns():
    table = markdown_table(summarise(RECORDS))
    lines = table.splitlines()
    assert lines[0] == "| method | math500 | mmlu | mean |"
    assert lines[2] == "| conductor:run | 50.0 ± 50.0 | 100.0 ± 0.0 | 75.0 ± 25.0 |"
    assert lines[3] == "| single:a | 100.0 ± 0.0 | 0.0 ± 0.0 | 50.0 ± 0.0 |"


def test_write_results_writes_four_parseable_files(tmp_path):
    cells, rows = summarise(RECORDS), strategy(RECORDS)
    paths = write_results(tmp_path / "out", cells, rows, RECORDS, {"config": "local.yaml", "repeats": 1})
    assert sorted(p.name for p in paths.values()) == [
        "accuracy_vs_cost.png",
        "records.parquet",
        "results.json",
        "results.md",
    ]
    results = json.loads(paths["results.json"].read_text())
    assert results["info"] == {"config": "local.yaml", "repeats": 1} and results["simulated"] is True
    assert [(c["method"], c["benchmark"]) for c in results["cells"]] == [
        ("conductor:run", "math500"),
        ("conductor:run", "mmlu"),
        ("single:a", "math500"),
        ("single:a", "mmlu"),
    ]
    assert results["strategy"][0]["worker_shares"] == {"a": 2 / 3, "b": 1 / 3}
    markdown = paths["results.md"].read_text()
    assert "**Simulated workers**: 1 of 6 samples used simulated workers (their workers: a)" in markdown
    assert markdown_table(cells) in markdown and "| conductor:run | 50.0 ± 50.0 |" in markdown
    assert "| single:a | 0.0010 |" in markdown  # $/sample, over the scored samples
    assert "| conductor:run | math | unknown | 2 | 1.50 | 50% | 50% | 0% | a 67%, b 33% |" in markdown
    assert "| repeats | 1 |" in markdown
    table = pq.read_table(paths["records.parquet"])
    assert table.num_rows == len(RECORDS)
    rows_back = table.to_pylist()
    assert rows_back[0]["workers"] == ["a", "b"] and json.loads(rows_back[0]["plan"])[1]["access"] == "all"
    assert rows_back[4]["verdict"] == "error" and rows_back[4]["plan"] is None
    assert paths["accuracy_vs_cost.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_real_workers_only_have_no_simulated_label(tmp_path):
    real = [r for r in RECORDS if not r.simulated]
    paths = write_results(tmp_path, summarise(real), strategy(real), real)
    assert "Simulated" not in paths["results.md"].read_text()


# --------------------------------------------------------------------------- the store


def test_store_appends_and_resumes_after_a_torn_last_line(tmp_path):
    store = RecordStore(tmp_path)
    assert store.records() == [] and store.done() == set()
    assert store.append(RECORDS[:3]) == 3
    with open(store.path, "a", encoding="utf-8") as out:  # a kill in the middle of the next write
        out.write(json.dumps(RECORDS[3].to_dict())[:40])
    resumed = RecordStore(tmp_path)
    assert resumed.records() == RECORDS[:3]
    assert resumed.done() == {r.key for r in RECORDS[:3]}
    resumed.append(RECORDS[3:])
    assert RecordStore(tmp_path).records() == RECORDS
    assert store.path.read_text(encoding="utf-8").count("\n") == len(RECORDS)


def test_store_retries_errors_and_keeps_the_last_record_of_a_key(tmp_path):
    store = RecordStore(tmp_path)
    failed = rec("single:a", "math500", "q2", 0, "error", error="timeout")
    store.append([failed])
    assert failed.key not in store.done()  # resumed runs try it again
    fixed = rec("single:a", "math500", "q2", 0, "correct", final_answer="line\u2028separator inside")
    store.append([fixed])
    assert store.records() == [fixed] and fixed.key in store.done()


def test_a_broken_line_before_the_last_is_an_error_naming_it(tmp_path):
    store = RecordStore(tmp_path)
    store.append(RECORDS[:1])
    with open(store.path, "a", encoding="utf-8") as out:
        out.write("{not json}\n")
    with pytest.raises(StoreError, match="line 2 is not a record"):
        RecordStore(tmp_path).records()


def test_settings_are_written_once_and_checked_on_resume(tmp_path):
    settings = {"methods": ["single:a", "moa"], "repeats": 3, "evaluate": {"limit": 10, "temperature": None}}
    RecordStore(tmp_path).check_settings(settings)
    assert json.loads((tmp_path / "evaluation.json").read_text()) == settings
    RecordStore(tmp_path).check_settings({**settings, "methods": ("single:a", "moa")})  # tuples equal lists
    changed = {**settings, "repeats": 5, "evaluate": {"limit": 20, "temperature": None}, "seed": 1}
    with pytest.raises(ResumeMismatchError) as info:
        RecordStore(tmp_path).check_settings(changed)
    message = str(info.value)
    assert "evaluate.limit, repeats, seed differ" in message and "another output folder" in message


def test_the_upper_bounds_are_rows_with_a_note_saying_what_they_bound(tmp_path):
    bounds = [
        rec(m, "math500", "q1", 0, "correct", steps=1, calls=1, workers=("a",)) for m in ("optimal", "oracle-single")
    ]
    records = RECORDS + bounds
    info = {"oracle_single": "exact: the highest expected success (less cost) by the simulator's rules"}
    text = write_results(tmp_path, summarise(records), strategy(records), records, info)["results.md"].read_text()
    accuracy = text.split("## Accuracy", 1)[1].split("## Cost", 1)[0]
    assert "\n| optimal | " in accuracy and "\n| oracle-single | " in accuracy
    note = next(line for line in accuracy.splitlines() if line.startswith("Upper bounds, not methods:"))
    assert note.index("`oracle-single`") < note.index("`optimal`") and "`oracle`" not in note
    assert "an upper bound of any router (exact: the highest expected success" in note
    assert "an upper bound of any plan of that family" in note
    plain = write_results(tmp_path / "plain", summarise(RECORDS), strategy(RECORDS), RECORDS)["results.md"]
    assert "Upper bounds" not in plain.read_text()


def test_a_cost_weight_is_a_setting_only_when_set_so_older_folders_resume(tmp_path):
    from conductor_rl.config import load_config
    from conductor_rl.evaluation.prepare import Evaluation, settings_of

    config = load_config(None)
    assert "cost_weight" not in settings_of(Evaluation(config, [], {}))  # as a folder written before it
    weighted = load_config(None, ["evaluate.cost_weight=10"])
    RecordStore(tmp_path).check_settings(settings_of(Evaluation(config, [], {})))
    with pytest.raises(ResumeMismatchError, match="cost_weight differ"):
        RecordStore(tmp_path).check_settings(settings_of(Evaluation(weighted, [], {})))


@pytest.mark.parametrize(
    "setting, words",
    [
        ("constrained", "constrained (the paper's Table 7: 4096 output tokens, minimal reasoning)"),
        ("unconstrained", "unconstrained (the paper's Table 1: each model's maximum budgets)"),
        ("custom", "custom (neither of the paper's settings)"),
    ],
)
def test_results_name_the_budget_setting_and_each_workers_budget(tmp_path, setting, words):
    workers = [
        {"name": "gpt", "provider": "openai", "model": "gpt-6.1-sol", "max_tokens": 4096, "reasoning": "minimal"},
        {
            "name": "qwen",
            "provider": "openai_compatible",
            "model": "Qwen/Qwen3-32B",
            "max_tokens": 4096,
            "reasoning": "off",
        },
    ]
    info = {"budgets": setting, "workers": workers}
    paths = write_results(tmp_path, summarise(RECORDS), strategy(RECORDS), RECORDS, info)
    line = next(x for x in paths["results.md"].read_text().splitlines() if x.startswith("> **Budgets**"))
    assert line == f"> **Budgets**: {words}: gpt 4096 tokens, reasoning minimal, qwen 4096 tokens, reasoning off."
    assert json.loads(paths["results.json"].read_text())["info"]["budgets"] == setting
