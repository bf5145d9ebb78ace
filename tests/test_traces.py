"""conductor_rl.run.traces: one Parquet file of rollout traces per iteration."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conductor_rl.run import traces
from conductor_rl.run.traces import TraceSchemaError, TraceWriter, read_traces, remove_after, trace_path


def step(index: int, worker: str) -> dict:
    return {
        "index": index,
        "model_id": index,
        "worker": worker,
        "subtask": f"do part {index}",
        "access": [] if index == 0 else "all",
        "messages": [{"role": "user", "content": "What is 3 * 6?"}],
        "response": "18",
        "usage": {"input_tokens": 10, "output_tokens": 20, "reasoning_tokens": 0, "cached_tokens": 0},
        "cost_usd": 0.0001,
        "latency_s": 0.5,
        "started_s": 0.0,
        "finished_s": 0.5,
        "error": None,
        "simulated": True,
    }


def rollout(iteration: int = 3, sample: int = 0, **changes) -> dict:
    record = {
        "iteration": iteration,
        "question_id": "gsm8k/test/143",
        "question": "What is 3 * 6?",
        "domain": "math",
        "reference": "18",
        "group": 0,
        "sample": sample,
        "completion": "model_id = [0, 1]\n...",
        "completion_tokens": 41,
        "plan": [
            {"model_id": 0, "subtask": "do part 0", "access": []},
            {"model_id": 1, "subtask": "do part 1", "access": "all"},
        ],
        "plan_error": None,
        "steps": [step(0, "sim-math-expert"), step(1, "sim-generalist")],
        "final_answer": "18",
        "verdict": "correct",
        "extracted_answer": "18",
        "grade_detail": "exact match",
        "reward": 1.0,
        "advantage": 0.5,
        "infrastructure_error": None,
        "cost_usd": 0.0002,
        "wall_s": 0.6,
        "simulated": True,
        "weights_version": 3,
        "attempts": 1,
    }
    record.update(changes)
    return record


def unparsed(iteration: int = 3, sample: int = 1) -> dict:
    return rollout(
        iteration,
        sample,
        plan=None,
        plan_error="no model_id list",
        steps=[],
        final_answer=None,
        verdict=None,
        extracted_answer=None,
        grade_detail=None,
        reward=0.0,
        advantage=-0.5,
        cost_usd=0.0,
        wall_s=0.0,
    )


def fixed_part(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    known = set(traces.COLUMNS) | set(traces.NESTED.values()) | set(traces.DERIVED)
    return [(f.name, f.type) for f in schema if f.name in known]


def test_round_trip_with_derived_columns(tmp_path):
    written = [rollout(), unparsed()]
    path = TraceWriter(tmp_path).write(3, written)
    assert path == tmp_path / "traces" / "iter-000003.parquet" and path.read_bytes()[:4] == b"PAR1"
    back = read_traces(tmp_path)
    assert len(back) == 2
    for original, row in zip(written, back):
        assert {k: row[k] for k in original} == original  # plan and steps decoded from JSON
    assert (back[0]["n_steps"], back[0]["workers"], back[0]["final_worker"]) == (
        2,
        ["sim-math-expert", "sim-generalist"],
        "sim-generalist",
    )
    assert (back[1]["n_steps"], back[1]["workers"], back[1]["final_worker"]) == (0, [], None)
    assert "plan_json" not in back[0]


def test_schema_is_typed_and_stable_whatever_the_content(tmp_path):
    writer = TraceWriter(tmp_path)
    writer.write(0, [rollout(0)])
    writer.write(1, [unparsed(1, sample=0) | {"reward": None, "advantage": None, "group": None}])
    writer.write(2, [])
    schemas = [pq.read_schema(trace_path(tmp_path, i)) for i in range(3)]
    assert fixed_part(schemas[0]) == fixed_part(schemas[1]) == fixed_part(schemas[2])
    types = dict(fixed_part(schemas[0]))
    assert types["reward"] == pa.float64() and types["group"] == pa.int64() and types["simulated"] == pa.bool_()
    assert types["question_id"] == pa.string() and types["plan_json"] == pa.string()
    assert types["workers"] == pa.list_(pa.string()) and types["n_steps"] == pa.int64()
    assert read_traces(tmp_path, iterations=[2]) == []
    assert read_traces(tmp_path, iterations=[1])[0]["reward"] is None


def test_unknown_keys_get_their_own_columns(tmp_path):
    records = [
        rollout(sample=0, judge_score=3, temperature=1, roster=["a", "b"], mixed=1, tag="x"),
        rollout(sample=1, judge_score=4, temperature=0.7, roster=None, mixed="one", meta_json={"k": 1}),
    ]
    path = TraceWriter(tmp_path).write(3, records)
    types = {f.name: f.type for f in pq.read_schema(path)}
    assert types["judge_score"] == pa.int64() and types["temperature"] == pa.float64() and types["tag"] == pa.string()
    assert (
        types["roster_json"] == pa.string()
        and types["mixed_json"] == pa.string()
        and types["meta_json_json"] == pa.string()
    )
    back = read_traces(tmp_path)
    assert [(r["judge_score"], r["temperature"], r["roster"], r["mixed"], r["tag"], r["meta_json"]) for r in back] == [
        (3, 1.0, ["a", "b"], 1, "x", None),
        (4, 0.7, None, "one", None, {"k": 1}),
    ]


def test_rewriting_an_iteration_replaces_it(tmp_path):
    writer = TraceWriter(tmp_path)
    writer.write(3, [rollout(sample=i) for i in range(4)])
    writer.write(3, [rollout(sample=9)])
    assert [r["sample"] for r in read_traces(tmp_path)] == [9]
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["iter-000003.parquet"]


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    writer = TraceWriter(tmp_path)
    writer.write(3, [rollout(sample=1)])

    def crash(table, where, **kwargs):
        where.write(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(traces.pq, "write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        writer.write(3, [rollout(sample=2)])
    monkeypatch.undo()
    assert [r["sample"] for r in read_traces(tmp_path)] == [1]
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["iter-000003.parquet"]


def test_read_orders_by_iteration_then_file_order_and_filters(tmp_path):
    writer = TraceWriter(tmp_path)
    for iteration in (10, 2, 1):
        writer.write(iteration, [rollout(iteration, sample=s) for s in (2, 0, 1)])
    assert [(r["iteration"], r["sample"]) for r in read_traces(tmp_path)] == [
        (1, 2),
        (1, 0),
        (1, 1),
        (2, 2),
        (2, 0),
        (2, 1),
        (10, 2),
        (10, 0),
        (10, 1),
    ]
    assert {r["iteration"] for r in read_traces(tmp_path, iterations=(2, 10, 99))} == {2, 10}
    assert read_traces(tmp_path / "no-run") == []


def test_remove_after_deletes_later_iterations(tmp_path):
    writer = TraceWriter(tmp_path)
    for iteration in range(5):
        writer.write(iteration, [rollout(iteration)])
    (tmp_path / "traces" / ".iter-000005.parquet.abc.tmp").write_bytes(b"left by a crash")
    removed = remove_after(tmp_path, 2)
    assert sorted(p.name for p in removed) == ["iter-000003.parquet", "iter-000004.parquet"]
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == [f"iter-00000{i}.parquet" for i in range(3)]
    assert remove_after(tmp_path, 2) == []


def test_records_read_back_can_be_written_again(tmp_path):
    TraceWriter(tmp_path).write(3, [rollout(extra={"a": 1})])
    first = read_traces(tmp_path)
    TraceWriter(tmp_path / "copy").write(3, first)
    assert read_traces(tmp_path / "copy") == first
    assert "n_steps_json" not in pq.read_schema(trace_path(tmp_path / "copy", 3)).names


def test_records_that_do_not_fit_raise(tmp_path):
    writer = TraceWriter(tmp_path)
    with pytest.raises(TraceSchemaError, match="iteration 4"):
        writer.write(3, [rollout(iteration=4)])
    with pytest.raises(TraceSchemaError, match="'group'"):
        writer.write(3, [rollout(group=1.5)])
    with pytest.raises(TraceSchemaError, match="'reward'"):
        writer.write(3, [rollout(reward="high")])
    with pytest.raises(TraceSchemaError, match="'steps'"):
        writer.write(3, [rollout(steps="none")])
    with pytest.raises(TraceSchemaError, match="strings"):
        writer.write(3, [rollout() | {7: "seven"}])
    with pytest.raises(TraceSchemaError, match=">= 0"):
        writer.write(-1, [])
    assert not any((tmp_path / "traces").iterdir())
