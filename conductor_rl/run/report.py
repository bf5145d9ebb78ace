"""The final report of a training run: `report.md` plus PNG plots in `report/`.

Everything comes from `metrics.jsonl` (see `conductor_rl.run.log`). Plots are
drawn with matplotlib's Agg canvas on `Figure` objects, never through pyplot,
so making a report changes no global matplotlib state. A plot whose metrics a
run never logged is left out rather than drawn empty.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from conductor_rl.run.log import METRICS_FILE, is_number
from conductor_rl.run.log import records as read_records
from conductor_rl.workers.spend_journal import JOURNAL_FILE, read_books, totals_by

REPORT_FILE = "report.md"
PLOTS_DIR = "report"
WINDOW = 3  # iterations in the rolling mean and in the first/last means of the summary
_PHASE_RE = re.compile(r"^time_(.+)_s$")


class ReportError(ValueError):
    """There is nothing to report (no metrics), or the report cannot be written."""


def _num(record: Mapping[str, Any], key: str) -> float:
    value = record.get(key)
    return float(value) if is_number(value) else math.nan


def _mean(values: Sequence[float]) -> float | None:
    present = [v for v in values if not math.isnan(v)]
    return sum(present) / len(present) if present else None


#: Asynchronous training's waits (time_<name>_s): the learner for rollouts, the generators for the bound.
WAITS = {"wait_learner": "learner waiting for rollouts", "wait_generate": "collection waiting on max_staleness"}


def _diff(last: float | None, first: float | None) -> float | None:
    return None if last is None or first is None else last - first


def phases(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The phase names timed in `records` ("generate" for time_generate_s, ...), in
    the order first logged; the whole iteration (time_iteration_s) is not a phase, nor
    is a wait of asynchronous training (`WAITS`)."""
    names: list[str] = []
    for record in records:
        for key in record:
            match = _PHASE_RE.match(key)
            if match and match.group(1) != "iteration" and match.group(1) not in WAITS and match.group(1) not in names:
                names.append(match.group(1))
    return names


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The numbers of the report's summary table, JSON-ready (None where a metric was never logged).
    first_* / last_* are means over the first / last min(3, n) iterations."""
    if not records:
        raise ReportError("no metrics records to summarize: the run logged no iteration")
    if any(not isinstance(r.get("iteration"), int) for r in records):
        raise ReportError("every metrics record needs an integer 'iteration'; pass records read with run_log.records")
    records = sorted(records, key=lambda r: r["iteration"])
    head, tail = records[:WINDOW], records[-WINDOW:]

    def window_means(key: str) -> tuple[float | None, float | None]:
        return _mean([_num(r, key) for r in head]), _mean([_num(r, key) for r in tail])

    first_reward, last_reward = window_means("reward_mean")
    first_accuracy, last_accuracy = window_means("accuracy")
    first_expected, last_expected = window_means("expected_reward_mean")
    # cost_total_usd is the loop's running total (it may include spending on iterations a
    # resume redid); without it the kept iterations' costs are added up.
    totals = [r["cost_total_usd"] for r in records if is_number(r.get("cost_total_usd"))]
    total_cost = (
        float(totals[-1]) if totals else sum(_num(r, "cost_usd") for r in records if is_number(r.get("cost_usd")))
    )
    return {
        "iterations": len(records),
        "first_iteration": records[0]["iteration"],
        "last_iteration": records[-1]["iteration"],
        "first_reward": first_reward,
        "last_reward": last_reward,
        "reward_gain": _diff(last_reward, first_reward),
        "first_accuracy": first_accuracy,
        "last_accuracy": last_accuracy,
        "accuracy_gain": _diff(last_accuracy, first_accuracy),
        "total_cost_usd": total_cost,
        "total_conductor_tokens": int(
            sum(r["conductor_tokens"] for r in records if is_number(r.get("conductor_tokens")))
        ),
        "mean_iteration_s": _mean([_num(r, "time_iteration_s") for r in records]),
        "phase_means": {name: _mean([_num(r, f"time_{name}_s") for r in records]) for name in phases(records)},
        # Asynchronous training (None when synchronous): the share of phase time hidden by overlap, the waits.
        "mean_overlap": _mean([_num(r, "overlap") for r in records]),
        "wait_means": {
            name: mean for name in WAITS if (mean := _mean([_num(r, f"time_{name}_s") for r in records])) is not None
        },
        # Simulated pools: the plans' exact expected reward, free of the workers' draws.
        "first_expected_reward": first_expected,
        "last_expected_reward": last_expected,
        "expected_reward_gain": _diff(last_expected, first_expected),
        "reward_gain_se": gain_se([_num(r, "reward_mean") for r in head], [_num(r, "reward_mean") for r in tail]),
        "expected_reward_gain_se": gain_se(
            [_num(r, "expected_reward_mean") for r in head], [_num(r, "expected_reward_mean") for r in tail]
        ),
        "learning": learning_line(records),
        "routing_first": routing_line(records[0]),
        "routing_last": routing_line(records[-1]),
        "plans_at_start": plans_learnt(records[0]),
        "plans_learnt": plans_learnt(records[-1]),
    }


def gain_se(head: Sequence[float], tail: Sequence[float]) -> float | None:
    """The standard error of mean(tail) - mean(head), from the spread of the iterations in each window
    (ddof 1); None with fewer than two iterations in a window or a value missing."""
    if len(head) < 2 or len(tail) < 2 or any(math.isnan(v) for v in (*head, *tail)):
        return None
    return math.sqrt(_variance(head) / len(head) + _variance(tail) / len(tail))


def _variance(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def learning_line(records: Sequence[Mapping[str, Any]]) -> str | None:
    """The reward of the first and the last iterations (`WINDOW` each) with the gain's standard error, the
    plans' exact expected reward where the pool is simulated, else the sampled one; whether the gain is
    more than two standard errors."""
    head, tail = records[:WINDOW], records[-WINDOW:]
    key = "expected_reward_mean" if all(is_number(r.get("expected_reward_mean")) for r in records) else "reward_mean"
    first, last = _mean([_num(r, key) for r in head]), _mean([_num(r, key) for r in tail])
    se = gain_se([_num(r, key) for r in head], [_num(r, key) for r in tail])
    if first is None or last is None or se is None or len(records) < 2 * WINDOW:
        return None
    what = "expected reward (exact, simulated pool)" if key == "expected_reward_mean" else "reward"
    verdict = "more than 2 s.e.: learning shows" if last - first > 2 * se else "within 2 s.e.: no learning shown"
    return (
        f"{what} of the first {WINDOW} iterations {first:.3f}, of the last {WINDOW} {last:.3f}: "
        f"{last - first:+.3f} ± {se:.3f} s.e., {verdict}"
    )


def routing_line(record: Mapping[str, Any]) -> str | None:
    """Which worker the iteration's plans ended on, per domain: "math: a 60%, b 40%; mmlu: ..."."""
    shares = record.get("final_worker_by_domain")
    if not isinstance(shares, Mapping) or not shares:
        return None
    parts = []
    for domain, by_worker in shares.items():
        if isinstance(by_worker, Mapping):
            ranked = sorted(((float(v), k) for k, v in by_worker.items() if is_number(v)), reverse=True)
            parts.append(f"{domain}: " + ", ".join(f"{k} {v:.0%}" for v, k in ranked))
    return f"iteration {record.get('iteration')}: " + "; ".join(parts) if parts else None


def plans_learnt(record: Mapping[str, Any]) -> str | None:
    """One line on how the iteration's plans look per domain and difficulty band (`plan_shapes`)."""
    shapes = record.get("plan_shapes")
    if not isinstance(shapes, Mapping) or not shapes:
        return None
    parts = []
    for key, shape in shapes.items():
        if not isinstance(shape, Mapping):
            continue
        parts.append(
            f"{key} {_num(shape, 'steps'):.1f} steps ({_num(shape, 'single_step_share'):.0%} one step, "
            f"{_num(shape, 'checking_share'):.0%} check an earlier answer), ending on {shape.get('final_worker')}"
        )
    return f"iteration {record.get('iteration')}: " + "; ".join(parts) if parts else None


# ---- plots ----------------------------------------------------------------------------------


def new_figure(width: float = 7.0, height: float = 4.0) -> Figure:
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)  # attaches itself as the figure's canvas
    return figure


def _rolling_mean(values: Sequence[float], window: int = WINDOW) -> list[float]:
    out = []
    for i in range(len(values)):
        mean = _mean(values[max(0, i - window + 1) : i + 1])
        out.append(math.nan if mean is None else mean)
    return out


def _has(records: Sequence[Mapping[str, Any]], key: str) -> bool:
    return any(is_number(r.get(key)) for r in records)


def _plot_reward(figure: Figure, records: Sequence[Mapping[str, Any]], its: list[int]) -> None:
    ax = figure.add_subplot()
    mean = [_num(r, "reward_mean") for r in records]
    std = [0.0 if math.isnan(s) else s for s in (_num(r, "reward_std") for r in records)]
    ax.fill_between(
        its, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2, label="± std"
    )
    ax.plot(its, mean, marker="o", label="reward mean")
    ax.plot(its, _rolling_mean(mean), linestyle="--", label=f"rolling mean ({WINDOW})")
    ax.set(xlabel="iteration", ylabel="reward", title="Reward")
    ax.legend(loc="best")


def _plot_accuracy(figure: Figure, records: Sequence[Mapping[str, Any]], its: list[int]) -> None:
    ax = figure.add_subplot()
    for key, label in (
        ("accuracy", "accuracy"),
        ("format_failure_rate", "format failures"),
        ("infra_error_rate", "infrastructure errors"),
    ):
        if _has(records, key):
            ax.plot(its, [_num(r, key) for r in records], marker="o", label=label)
    ax.set(xlabel="iteration", ylabel="share of rollouts", ylim=(-0.02, 1.02), title="Accuracy and failures")
    ax.legend(loc="best")


def _plot_worker_usage(figure: Figure, records: Sequence[Mapping[str, Any]], its: list[int]) -> None:
    ax = figure.add_subplot()
    workers = sorted({w for r in records for w in (r.get("worker_usage") or {})})
    shares = [[_share(r.get("worker_usage"), w) for r in records] for w in workers]
    ax.stackplot(its, shares, labels=workers, alpha=0.85)
    ax.set(xlabel="iteration", ylabel="share of steps", ylim=(0, 1.02), title="Worker usage")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")


def _share(shares: Any, worker: str) -> float:
    value = shares.get(worker) if isinstance(shares, Mapping) else None
    return float(value) if is_number(value) and not math.isnan(value) else 0.0


def _plot_cost(figure: Figure, records: Sequence[Mapping[str, Any]], its: list[int]) -> None:
    ax = figure.add_subplot()
    cost = [0.0 if math.isnan(c) else c for c in (_num(r, "cost_usd") for r in records)]
    ax.bar(its, cost, color="tab:blue", alpha=0.7, label="per iteration")
    ax.set(xlabel="iteration", ylabel="cost per iteration (USD)", title="Worker cost")
    cumulative, running = [], 0.0
    for r, c in zip(records, cost):
        running += c
        total = r.get("cost_total_usd")
        cumulative.append(float(total) if is_number(total) else running)
    twin = ax.twinx()
    twin.plot(its, cumulative, color="tab:red", marker="o", label="cumulative")
    twin.set_ylabel("cumulative cost (USD)")
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(handles, [str(h.get_label()) for h in handles], loc="upper left")


def _plot_final_worker(figure: Figure, records: Sequence[Mapping[str, Any]], its: list[int]) -> None:
    domains = sorted({d for r in records for d in (r.get("final_worker_by_domain") or {})})
    with_best = _has(records, "best_worker_share")
    panels = len(domains) + with_best
    cols = min(panels, 3)
    rows = math.ceil(panels / cols)
    figure.set_size_inches(4.2 * cols, 3.4 * rows)
    for n, domain in enumerate(domains):
        ax = figure.add_subplot(rows, cols, n + 1)
        by_domain = [(r.get("final_worker_by_domain") or {}).get(domain) for r in records]
        for worker in sorted({w for shares in by_domain if isinstance(shares, Mapping) for w in shares}):
            ax.plot(its, [_share(s, worker) for s in by_domain], marker=".", label=worker)
        ax.set(title=f"{domain}: final worker", xlabel="iteration", ylabel="share of plans", ylim=(-0.02, 1.02))
        ax.legend(loc="best", fontsize="small")
    if with_best:
        ax = figure.add_subplot(rows, cols, panels)
        ax.plot(its, [_num(r, "best_worker_share") for r in records], marker="o", color="black")
        ax.set(title="best worker chosen last", xlabel="iteration", ylabel="share of plans", ylim=(-0.02, 1.02))


def _plot_phases(figure: Figure, records: Sequence[Mapping[str, Any]], its: list[int]) -> None:
    ax = figure.add_subplot()
    bottom = [0.0] * len(records)
    for name in phases(records):
        seconds = [0.0 if math.isnan(v) else v for v in (_num(r, f"time_{name}_s") for r in records)]
        ax.bar(its, seconds, bottom=bottom, label=name)
        bottom = [b + s for b, s in zip(bottom, seconds)]
    if _has(records, "time_iteration_s"):
        ax.plot(
            its,
            [_num(r, "time_iteration_s") for r in records],
            color="black",
            marker="_",
            linestyle="none",
            markersize=14,
            label="whole iteration",
        )
    for name, label in WAITS.items():  # asynchronous training: the phases overlap, the waits show where
        if _has(records, f"time_{name}_s"):
            ax.plot(its, [_num(r, f"time_{name}_s") for r in records], marker=".", linestyle="--", label=label)
    ax.set(xlabel="iteration", ylabel="seconds", title="Time per phase")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")


# (file stem, alt text, plotter, whether the records hold what it draws)
_PLOTS: tuple[tuple[str, str, Callable[..., None], Callable[[Sequence[Mapping[str, Any]]], bool]], ...] = (
    ("reward", "reward", _plot_reward, lambda rs: _has(rs, "reward_mean")),
    ("accuracy", "accuracy", _plot_accuracy, lambda rs: _has(rs, "accuracy") or _has(rs, "format_failure_rate")),
    ("worker_usage", "worker usage", _plot_worker_usage, lambda rs: any(r.get("worker_usage") for r in rs)),
    ("cost", "cost", _plot_cost, lambda rs: _has(rs, "cost_usd") or _has(rs, "cost_total_usd")),
    (
        "best_worker",
        "final worker by domain",
        _plot_final_worker,
        lambda rs: any(r.get("final_worker_by_domain") for r in rs) or _has(rs, "best_worker_share"),
    ),
    ("phases", "time per phase", _plot_phases, lambda rs: bool(phases(rs)) or _has(rs, "time_iteration_s")),
)


def write_plots(records: Sequence[Mapping[str, Any]], folder: Path) -> list[tuple[str, Path]]:
    """Draw every plot the records have data for into `folder`; returns (alt text, file) pairs."""
    folder.mkdir(parents=True, exist_ok=True)
    its = [int(r["iteration"]) for r in records]
    written = []
    for stem, alt, plot, applies in _PLOTS:
        path = folder / f"{stem}.png"
        if not applies(records):
            path.unlink(missing_ok=True)  # a stale plot from an earlier report of this folder
            continue
        figure = new_figure()
        plot(figure, records, its)
        figure.savefig(path, dpi=100, bbox_inches="tight")
        written.append((alt, path))
    return written


# ---- markdown -------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if isinstance(value, (Mapping, list, tuple)):
        value = json.dumps(value, default=str)
    return str(value).replace("|", "\\|").replace("\n", " ")


def table_lines(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines + [""]


def _fmt(value: float | None, spec: str = ".3f", signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return format(value, ("+" if signed else "") + spec)


def _summary_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    n = summary["iterations"]
    k = min(WINDOW, n)
    rows = [("iterations run", f"{n} ({summary['first_iteration']}–{summary['last_iteration']})")]
    for metric in ("reward", "accuracy"):
        rows += [
            (f"{metric}, mean of first {k}", _fmt(summary[f"first_{metric}"])),
            (f"{metric}, mean of last {k}", _fmt(summary[f"last_{metric}"])),
            (f"{metric} gain (last − first)", _fmt(summary[f"{metric}_gain"], signed=True)),
        ]
    rows += [
        ("total worker cost (USD)", f"{summary['total_cost_usd']:.4f}"),
        ("total conductor tokens", f"{summary['total_conductor_tokens']:,}"),
        ("mean iteration time (s)", _fmt(summary["mean_iteration_s"], ".2f")),
    ]
    rows += [(f"mean time: {name} (s)", _fmt(mean, ".2f")) for name, mean in summary["phase_means"].items()]
    if summary.get("learning"):
        rows.append(("learning curve", summary["learning"]))
    for key, label in (
        ("routing_first", "final worker per domain, first iteration"),
        ("routing_last", "final worker per domain, last iteration"),
        ("plans_at_start", "plans, first iteration (per domain/difficulty)"),
        ("plans_learnt", "plans, last iteration (per domain/difficulty)"),
    ):
        if summary.get(key):
            rows.append((label, summary[key]))
    if summary.get("mean_overlap") is not None:
        rows.append(("mean overlap of phases (asynchronous)", _fmt(summary["mean_overlap"], ".2f")))
    rows += [
        (f"mean time: {WAITS[name]} (s)", _fmt(mean, ".2f")) for name, mean in summary.get("wait_means", {}).items()
    ]
    return rows


def _final_worker_lines(last: Mapping[str, Any]) -> list[str]:
    by_domain = last.get("final_worker_by_domain")
    if not isinstance(by_domain, Mapping) or not by_domain:
        return []
    workers = sorted({w for shares in by_domain.values() if isinstance(shares, Mapping) for w in shares})
    rows = []
    for domain in sorted(by_domain):
        shares = by_domain[domain] if isinstance(by_domain[domain], Mapping) else {}
        top = max(workers, key=lambda w: _share(shares, w)) if shares else "n/a"
        rows.append([domain, top] + [f"{_share(shares, w):.0%}" if w in shares else "–" for w in workers])
    title = f"## Final worker choice (iteration {last['iteration']})"
    note = "Share of parsed plans whose last step used each worker, per question domain."
    return [title, "", note, ""] + table_lines(["domain", "most chosen"] + workers, rows)


def spend_lines(run_dir: Path) -> list[str]:
    """The run's spend from its journal (nothing without one): totals and each worker's share."""
    books = read_books(run_dir / JOURNAL_FILE)
    if not books.sessions:
        return []
    lines = [
        "## Spend",
        "",
        f"From `{JOURNAL_FILE}` (`conductor-rl spend {run_dir}`): ${books.spent_usd:.4f} over "
        f"{len(books.billed)} calls billed and {len(books.lost)} lost with a crashed process (counted at "
        f"their worst case), in {len(books.sessions)} session(s).",
        "",
    ]
    rows = [
        (r["worker"], r["calls"], r["lost"], r["input_tokens"], r["output_tokens"], f"{r['usd']:.4f}")
        for r in totals_by(books, "worker")
    ]
    return lines + table_lines(["worker", "calls", "lost", "input tokens", "output tokens", "USD"], rows)


def render_markdown(
    title: str,
    records: Sequence[Mapping[str, Any]],
    plots: Sequence[tuple[str, Path]],
    base: Path,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The report's markdown; plot links are relative to `base` (the folder of report.md)."""
    summary = summarize(records)
    lines = [f"# {title}", "", "## Summary", ""]
    lines += table_lines(["metric", "value"], _summary_rows(summary))
    lines += _final_worker_lines(max(records, key=lambda r: r["iteration"]))
    if extra:
        lines += ["## Run", ""] + table_lines(["key", "value"], [(k, v) for k, v in extra.items()])
    lines += spend_lines(base)
    if plots:
        lines += ["## Plots", ""]
        for alt, path in plots:
            lines += [f"![{alt}]({path.relative_to(base).as_posix()})", ""]
    return "\n".join(lines)


def write_report(run_dir: str | Path, title: str = "Training report", extra: Mapping[str, Any] | None = None) -> Path:
    """Write `<run_dir>/report.md` and its plots in `<run_dir>/report/`; returns report.md's path."""
    run_dir = Path(run_dir)
    if not (run_dir / METRICS_FILE).exists():
        raise ReportError(
            f"no {METRICS_FILE} in {run_dir}: "
            "pass the output folder of a training run that logged at least one iteration"
        )
    records = sorted(read_records(run_dir), key=lambda r: r["iteration"])
    if not records:
        raise ReportError(
            f"{run_dir / METRICS_FILE} holds no complete record: "
            "the run logged no iteration, so there is nothing to report"
        )
    plots = write_plots(records, run_dir / PLOTS_DIR)
    path = run_dir / REPORT_FILE
    path.write_text(render_markdown(title, records, plots, run_dir, extra), encoding="utf-8")
    return path
