"""The outputs of an evaluation: results.json, results.md, records.parquet and
accuracy_vs_cost.png (the training run's report is `conductor_rl.run.report`,
whose figure and table helpers are reused here).

Decisions:

- Accuracy is shown in percent as "acc ± se"; the "mean" column (with more
  than one benchmark) averages a method's benchmarks with equal weight.
- Costs and tokens per sample, calls and steps are averaged over a method's
  benchmarks with equal weight too, as is the plot's point; the plot's error
  bar is the standard error of that mean, sqrt(sum se_b^2) / B, the benchmarks
  being independent samples.
- The plot's cost axis is logarithmic when every method costs something and
  they span more than a factor of 20 (the paper's range), linear otherwise.
- A plan does not fit a Parquet column type (access is "all" or a list): it
  is stored as JSON text.
- The upper bounds (`oracle`, `oracle-single`, `optimal`) stay rows of the
  tables, as the paper's oracle does, with a note under the accuracy table
  saying what each bounds and how `oracle-single` picked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from conductor_rl.atomic_files import write_atomically
from conductor_rl.evaluation.methods import UPPER_BOUNDS
from conductor_rl.evaluation.summary import Cell, EvalRecord, StrategyRow
from conductor_rl.run.report import new_figure, table_lines

__all__ = [
    "PLOT_FILE",
    "RECORDS_FILE",
    "RESULTS_JSON",
    "RESULTS_MD",
    "markdown_table",
    "records_table",
    "write_results",
]

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
RECORDS_FILE = "records.parquet"
PLOT_FILE = "accuracy_vs_cost.png"

SCHEMA = pa.schema(
    [
        ("method", pa.string()),
        ("benchmark", pa.string()),
        ("question_id", pa.string()),
        ("domain", pa.string()),
        ("repeat", pa.int64()),
        ("verdict", pa.string()),
        ("steps", pa.int64()),
        ("workers", pa.list_(pa.string())),
        ("calls", pa.int64()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cost_usd", pa.float64()),
        ("wall_s", pa.float64()),
        ("simulated", pa.bool_()),
        ("final_answer", pa.string()),
        ("plan", pa.string()),
        ("error", pa.string()),
        ("difficulty", pa.float64()),
        ("recursive_calls", pa.int64()),
        ("calls_on_right", pa.int64()),
        ("stops_on_right", pa.int64()),
        ("calls_on_wrong", pa.int64()),
        ("stops_on_wrong", pa.int64()),
    ]
)


def _in_order(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _acc(cell: Cell | None) -> str:
    if cell is None:
        return ""
    if cell.accuracy is None:
        return f"n/a ({cell.errors} errors)"
    return f"{100 * cell.accuracy:.1f} ± {100 * (cell.stderr or 0.0):.1f}"


@dataclass(frozen=True)
class _MethodMean:
    """One method's means over its benchmarks; accuracy and stderr are None when none was scored."""

    accuracy: float | None
    stderr: float | None
    cost_usd: float
    input_tokens: float
    output_tokens: float
    calls: float
    steps: float | None
    errors: int


def _method_means(cells: Sequence[Cell]) -> dict[str, _MethodMean]:
    """Per method, its benchmarks' equal-weight means (see the module's decisions)."""
    out: dict[str, _MethodMean] = {}
    for method in _in_order([c.method for c in cells]):
        mine = [c for c in cells if c.method == method]
        scored = [c for c in mine if c.accuracy is not None]
        steps = [c.steps for c in mine if c.steps is not None]

        def mean(key: str, among: Sequence[Cell] = mine) -> float:
            return sum(getattr(c, key) for c in among) / len(among) if among else 0.0

        out[method] = _MethodMean(
            accuracy=mean("accuracy", scored) if scored else None,
            stderr=math.sqrt(sum((c.stderr or 0.0) ** 2 for c in scored)) / len(scored) if scored else None,
            cost_usd=mean("cost_usd"),
            input_tokens=mean("input_tokens"),
            output_tokens=mean("output_tokens"),
            calls=mean("calls"),
            steps=sum(steps) / len(steps) if steps else None,
            errors=sum(c.errors for c in mine),
        )
    return out


def markdown_table(cells: Sequence[Cell]) -> str:
    """The accuracy table: methods in rows, benchmarks in columns, "acc ± se" in percent."""
    benchmarks = _in_order([c.benchmark for c in cells])
    by_key = {(c.method, c.benchmark): c for c in cells}
    means = _method_means(cells)
    header = ["method", *benchmarks] + (["mean"] if len(benchmarks) > 1 else [])
    rows = []
    for method, m in means.items():
        row = [method] + [_acc(by_key.get((method, b))) for b in benchmarks]
        if len(benchmarks) > 1:
            row.append(
                "n/a" if m.accuracy is None or m.stderr is None else f"{100 * m.accuracy:.1f} ± {100 * m.stderr:.1f}"
            )
        rows.append(row)
    return "\n".join(table_lines(header, rows))


_BOUNDS = {
    "oracle": "per question, the single worker whose own runs were most often right there: it has seen the outcomes",
    "oracle-single": "per question, the single worker with the highest expected success: an upper bound of any router",
    "optimal": "per question, the exact best plan of up to conductor.max_steps steps by the simulator's "
    "rules: an upper bound of any plan of that family",
}


def _bounds_note(cells: Sequence[Cell], info: Mapping[str, Any]) -> list[str]:
    """A note on the rows that are upper bounds, not methods."""
    rows = [m for m in UPPER_BOUNDS if any(c.method == m for c in cells)]
    if not rows:
        return []
    how = {"oracle-single": f" ({info['oracle_single']})" if "oracle_single" in info else ""}
    bounds = "; ".join(f"`{m}`, {_BOUNDS[m]}{how.get(m, '')}" for m in rows)
    return ["", f"Upper bounds, not methods: {bounds}.", ""]


def _cost_table(cells: Sequence[Cell]) -> str:
    rows = [
        [
            method,
            f"{m.cost_usd:.4f}",
            f"{m.input_tokens:.0f}",
            f"{m.output_tokens:.0f}",
            f"{m.calls:.2f}",
            "" if m.steps is None else f"{m.steps:.2f}",
            m.errors,
        ]
        for method, m in _method_means(cells).items()
    ]
    header = [
        "method",
        "$/sample",
        "input tokens/sample",
        "output tokens/sample",
        "calls/sample",
        "steps/plan",
        "errors",
    ]
    return "\n".join(table_lines(header, rows))


def _strategy_table(rows: Sequence[StrategyRow]) -> str:
    body = [
        [
            r.method,
            r.domain,
            r.band,
            r.plans,
            f"{r.mean_steps:.2f}",
            f"{100 * r.single_step_share:.0f}%",
            f"{100 * r.reading_share:.0f}%",
            f"{100 * r.checking_share:.0f}%",
            ", ".join(f"{w} {100 * s:.0f}%" for w, s in r.worker_shares.items()),
        ]
        for r in rows
    ]
    header = ["method", "domain", "difficulty", "plans", "steps", "one step", "reads", "checks", "share of calls"]
    return "\n".join(table_lines(header, body))


# The paper's two settings, as a results.md line names them (workflow.budgets).
BUDGET_SETTINGS = {
    "constrained": "constrained (the paper's Table 7: 4096 output tokens, minimal reasoning)",
    "unconstrained": "unconstrained (the paper's Table 1: each model's maximum budgets)",
    "custom": "custom (neither of the paper's settings)",
}


def _budgets_line(info: Mapping[str, Any]) -> str:
    workers = ", ".join(
        f"{w['name']} {w['max_tokens']} tokens, reasoning {w['reasoning']}"
        for w in info.get("workers", ())
        if "max_tokens" in w
    )
    setting = BUDGET_SETTINGS.get(info["budgets"], info["budgets"])
    return f"> **Budgets**: {setting}" + (f": {workers}." if workers else ".")


def render_markdown(
    cells: Sequence[Cell], strategy: Sequence[StrategyRow], info: Mapping[str, Any], records: Sequence[EvalRecord] = ()
) -> str:
    """results.md; a header line says when any of `records` used simulated workers."""
    lines = ["# Evaluation results", ""]
    simulated = [r for r in records if r.simulated]
    if simulated:
        # A record knows only that some step was simulated, so the names are those samples' workers.
        names = ", ".join(sorted({w for r in simulated for w in r.workers}))
        lines += [
            f"> **Simulated workers**: {len(simulated)} of {len(records)} samples used simulated workers "
            f"(their workers: {names}), so these numbers test the pipeline and say nothing about real models.",
            "",
        ]
    if "budgets" in info:
        lines += [_budgets_line(info), ""]
    lines += [
        "## Accuracy",
        "",
        "Percent correct, ± the standard error over questions (each question's mean "
        "over its repeats); plan errors count as wrong, infrastructure errors are left out.",
        "",
        markdown_table(cells),
        *_bounds_note(cells, info),
        "## Cost",
        "",
        "Per scored sample, averaged over the benchmarks.",
        "",
        _cost_table(cells),
    ]
    if strategy:
        lines += [
            "## Conductor strategy",
            "",
            "Steps per plan and each worker's share of the calls, per domain.",
            "",
            _strategy_table(strategy),
        ]
    if info:
        lines += ["## Settings", "", "\n".join(table_lines(["key", "value"], list(info.items())))]
    lines += [f"![accuracy against cost]({PLOT_FILE})", ""]
    return "\n".join(lines)


def records_table(records: Sequence[EvalRecord]) -> pa.Table:
    """One row per record (the plan as JSON text)."""
    rows = []
    for r in records:
        row = r.to_dict()
        row["plan"] = None if r.plan is None else json.dumps(row["plan"], ensure_ascii=False)
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _plot(cells: Sequence[Cell], path: Path, simulated: bool) -> None:
    points = [
        (method, m.cost_usd, m.accuracy, m.stderr)
        for method, m in _method_means(cells).items()
        if m.accuracy is not None and m.stderr is not None
    ]
    figure = new_figure(7.0, 4.5)
    axes = figure.add_subplot()
    for method, cost, accuracy, stderr in points:
        axes.errorbar(cost, 100 * accuracy, yerr=100 * stderr, fmt="o", capsize=3)
        axes.annotate(method, (cost, 100 * accuracy), textcoords="offset points", xytext=(4, 4), fontsize=8)
    costs = [cost for _, cost, _, _ in points]
    if costs and min(costs) > 0 and max(costs) / min(costs) > 20:
        axes.set_xscale("log")
    axes.set_xlabel("dollars per sample (mean over benchmarks)")
    axes.set_ylabel("accuracy, % (mean over benchmarks)")
    axes.set_title("Accuracy against cost" + (" (simulated workers)" if simulated else ""))
    axes.grid(alpha=0.3)
    figure.savefig(path, dpi=100, bbox_inches="tight")


def write_results(
    folder: str | Path,
    cells: Sequence[Cell],
    strategy: Sequence[StrategyRow],
    records: Sequence[EvalRecord],
    info: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write the four result files into `folder`; returns their paths by file name."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    info = dict(info or {})
    simulated = any(r.simulated for r in records)
    paths = {name: folder / name for name in (RESULTS_JSON, RESULTS_MD, RECORDS_FILE, PLOT_FILE)}
    payload = {
        "cells": [c.to_dict() for c in cells],
        "strategy": [s.to_dict() for s in strategy],
        "info": info,
        "simulated": simulated,
    }
    write_atomically(paths[RESULTS_JSON], lambda out: json.dump(payload, out, indent=2, default=str))
    markdown = render_markdown(cells, strategy, info, records)
    write_atomically(paths[RESULTS_MD], lambda out: out.write(markdown))
    table = records_table(records)
    write_atomically(paths[RECORDS_FILE], lambda out: pq.write_table(table, out, compression="zstd"), binary=True)
    _plot(cells, paths[PLOT_FILE], simulated)
    return paths
