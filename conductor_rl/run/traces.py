"""Rollout traces: every rollout of an iteration in one Parquet file.

`<run_dir>/traces/iter-000003.parquet` holds iteration 3's rollouts, one row
each. The file is written to a temporary name and renamed into place, so a
reader never sees half a file and a resumed run that redoes iteration 3
replaces it (nothing is counted twice).

Schema (stable whatever the content; every column nullable):
- the known scalar fields of a rollout record, typed (`COLUMNS`);
- `plan_json`, `steps_json`: the nested plan and steps as JSON text;
- `n_steps` (int64), `workers` (list<string>: each executed step's worker, in
  order), `final_worker` (string: the last executed step's worker, null when
  no step ran), computed from the steps;
- any other key: its own typed column when all its values in the file are
  scalars of one kind (bool, int64, float64 for ints mixed with floats,
  string), else `<key>_json` holding JSON text (always so for a key that
  itself ends in "_json"). Extra columns can differ from file to file.
`read_traces` turns rows back into dicts: `plan`, `steps` and every
`<key>_json` column decoded to `key`.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from conductor_rl.atomic_files import write_atomically

TRACES_DIR = "traces"
SCHEMA_VERSION = "1"
_FILE_RE = re.compile(r"^iter-(\d+)\.parquet$")

COLUMNS: dict[str, pa.DataType] = {
    "iteration": pa.int64(),
    "question_id": pa.string(),
    "question": pa.string(),
    "domain": pa.string(),
    "reference": pa.string(),
    "group": pa.int64(),
    "sample": pa.int64(),
    "completion": pa.string(),
    "completion_tokens": pa.int64(),
    "plan_error": pa.string(),
    "final_answer": pa.string(),
    "verdict": pa.string(),
    "extracted_answer": pa.string(),
    "grade_detail": pa.string(),
    "reward": pa.float64(),
    "advantage": pa.float64(),
    "infrastructure_error": pa.string(),
    "cost_usd": pa.float64(),
    "wall_s": pa.float64(),
    "simulated": pa.bool_(),
    "weights_version": pa.int64(),
    "attempts": pa.int64(),
}
# Nested fields stored as JSON text, and the columns computed from the steps.
NESTED = {"plan": "plan_json", "steps": "steps_json"}
DERIVED: dict[str, pa.DataType] = {"n_steps": pa.int64(), "workers": pa.list_(pa.string()), "final_worker": pa.string()}
_RESERVED = set(COLUMNS) | set(NESTED.values()) | set(DERIVED)


class TraceSchemaError(ValueError):
    """A rollout record does not fit the trace schema."""


def trace_path(run_dir: str | Path, iteration: int) -> Path:
    return Path(run_dir) / TRACES_DIR / f"iter-{iteration:06d}.parquet"


def _to_json(value: Any) -> str | None:
    # allow_nan: a NaN reward inside a step must not make the whole iteration unwritable.
    return None if value is None else json.dumps(value, default=str, ensure_ascii=False)


def _cell(value: Any, kind: pa.DataType, key: str) -> Any:
    """`value` as a cell of a column of type `kind`, or TraceSchemaError."""
    if value is None:
        return None
    if kind == pa.string():
        if isinstance(value, str):
            return value
        # A non-text value in a text field (a numeric reference) is kept as its text, nested ones as JSON.
        return _to_json(value) if isinstance(value, (Mapping, list, tuple)) else str(value)
    if kind == pa.bool_():
        if isinstance(value, bool) or type(value).__name__ == "bool_":
            return bool(value)
    elif kind == pa.int64():
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value).is_integer():
            return math.trunc(value)
    elif kind == pa.float64():
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
    raise TraceSchemaError(
        f"field {key!r} must be {kind} or None, got {type(value).__name__} {value!r}; fix the record"
    )


def _scalar_kind(values: Sequence[Any]) -> pa.DataType | None:
    """The one column type that holds all non-null `values`, or None when they need JSON."""
    present = [v for v in values if v is not None]
    if all(isinstance(v, bool) for v in present):
        return pa.bool_()  # also an all-null column: cheapest type, read back as None
    if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in present):
        return pa.int64()
    if all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in present):
        return pa.float64()
    if all(isinstance(v, str) for v in present):
        return pa.string()
    return None


def _worker_of(step: Any) -> str | None:
    worker = step.get("worker") if isinstance(step, Mapping) else None
    return None if worker is None else str(worker)


def to_table(iteration: int, records: Sequence[Mapping[str, Any]]) -> pa.Table:
    """The Arrow table of one iteration's rollout records (see the module doc for the schema)."""
    rows = []
    for i, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise TraceSchemaError(
                f"trace record {i} is a {type(record).__name__}, not a dict; pass Rollout.to_dict() records"
            )
        own = record.get("iteration", iteration)
        if own is not None and own != iteration:
            raise TraceSchemaError(
                f"trace record {i} is from iteration {own}, not {iteration}; write each iteration's records separately"
            )
        rows.append(record)

    fields: list[pa.Field] = []
    arrays: list[pa.Array] = []

    def add(name: str, kind: pa.DataType, values: list[Any]) -> None:
        fields.append(pa.field(name, kind))
        arrays.append(pa.array(values, type=kind))

    for key, kind in COLUMNS.items():
        if key == "iteration":
            add(key, kind, [iteration] * len(rows))
        else:
            add(key, kind, [_cell(r.get(key), kind, key) for r in rows])
    for key, column in NESTED.items():
        add(column, pa.string(), [_to_json(r.get(key)) for r in rows])

    steps_of = [r.get("steps") or [] for r in rows]
    for i, steps in enumerate(steps_of):
        if not isinstance(steps, (list, tuple)):
            raise TraceSchemaError(
                f"trace record {i}: 'steps' must be a list of step dicts, got {type(steps).__name__}"
            )
    add("n_steps", DERIVED["n_steps"], [len(s) for s in steps_of])
    add("workers", DERIVED["workers"], [[_worker_of(step) for step in s] for s in steps_of])
    add("final_worker", DERIVED["final_worker"], [_worker_of(s[-1]) if s else None for s in steps_of])

    # Keys read back from a trace file (derived columns, *_json twins) are recomputed, not duplicated.
    # A key already ending in "_json" is always stored as JSON (column "<key>_json"), so that reading
    # back can decode every "*_json" column and no two keys can claim one column.
    keys = {k for r in rows for k in r}
    if any(not isinstance(k, str) for k in keys):
        raise TraceSchemaError(f"trace record keys must be strings, got {sorted(map(repr, keys))}; rename the fields")
    extras = sorted(keys - _RESERVED - set(NESTED))
    for key in extras:
        values = [r.get(key) for r in rows]
        kind = None if key.endswith("_json") else _scalar_kind(values)
        if kind is None:
            add(f"{key}_json", pa.string(), [_to_json(v) for v in values])
        else:
            add(key, kind, [_cell(v, kind, key) for v in values])
    schema = pa.schema(fields, metadata={"conductor_rl.run.traces.version": SCHEMA_VERSION})
    return pa.Table.from_arrays(arrays, schema=schema)


class TraceWriter:
    """Writes each iteration's rollout traces to `<run_dir>/traces/iter-NNNNNN.parquet`."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.folder = self.run_dir / TRACES_DIR
        self.folder.mkdir(parents=True, exist_ok=True)

    def write(self, iteration: int, records: Sequence[Mapping[str, Any]]) -> Path:
        """Write (or replace) iteration `iteration`'s traces atomically; returns the file."""
        if isinstance(iteration, bool) or not isinstance(iteration, numbers.Integral) or iteration < 0:
            raise TraceSchemaError(f"iteration must be an int >= 0, got {iteration!r}")
        table = to_table(int(iteration), list(records))
        path = trace_path(self.run_dir, int(iteration))
        write_atomically(path, lambda out: pq.write_table(table, out, compression="zstd"), binary=True)
        return path


def trace_files(run_dir: str | Path) -> dict[int, Path]:
    """{iteration: file} of the trace files in a run folder, sorted by iteration."""
    folder = Path(run_dir) / TRACES_DIR
    if not folder.is_dir():
        return {}
    found = {}
    for path in folder.iterdir():
        match = _FILE_RE.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def _from_row(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in row.items():
        if name in NESTED.values() or (name.endswith("_json") and name not in _RESERVED):
            key = name[: -len("_json")]
            out[key] = None if value is None else json.loads(value)
        else:
            out[name] = value
    if out.get("steps") is None:
        out["steps"] = []
    return out


def read_traces(run_dir: str | Path, iterations: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """The rollout records of a run (all iterations, or those asked for that have a
    file), ordered by iteration then by their order in the file."""
    wanted = None if iterations is None else {int(i) for i in iterations}
    rows: list[dict[str, Any]] = []
    for iteration, path in trace_files(run_dir).items():
        if wanted is None or iteration in wanted:
            rows.extend(_from_row(row) for row in pq.read_table(path).to_pylist())
    return rows


def remove_after(run_dir: str | Path, iteration: int) -> list[Path]:
    """Delete the trace files of iterations after `iteration` (a resumed run redoes
    them) and any temporary file a crash left; returns the trace files deleted."""
    removed = []
    for number, path in trace_files(run_dir).items():
        if number > iteration:
            path.unlink()
            removed.append(path)
    folder = Path(run_dir) / TRACES_DIR
    if folder.is_dir():
        for leftover in folder.glob(".iter-*.tmp"):
            leftover.unlink(missing_ok=True)
    return removed
