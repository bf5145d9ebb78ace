"""`conductor-rl spend RUN_DIR`: what a run's worker calls cost, from its spend journal.

    conductor-rl spend runs/local                       # totals, by worker and by iteration (or cell)
    conductor-rl spend runs/local --by model --by s     # groupings: worker model provider it cell s job day client
    conductor-rl spend runs/eval-local --csv calls.csv  # one row per call (also --parquet FILE)
    conductor-rl spend runs/local --json                # the totals as JSON on the last line

RUN_DIR is a `train.output_dir`, an `evaluate.output_dir` or a `serve.output_dir` (or a spend.jsonl). The journal
is read as it is: this works on a run that is still going and on one that crashed. Calls lost with a
crashed process count at their worst-case cost and are shown apart; calls still open are in flight,
or were cut off by a crash that no resumed session has settled yet (docs/guide/spend.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from conductor_rl.workers.spend_journal import (
    GROUPS,
    JOURNAL_FILE,
    Books,
    call_rows,
    read_books,
    totals_by,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help=f"a run's output folder (or its {JOURNAL_FILE})")
    parser.add_argument(
        "--by", action="append", choices=GROUPS, help="a grouping to show (repeatable; s is the session)"
    )
    parser.add_argument("--csv", metavar="FILE", help="write one row per call to FILE as CSV")
    parser.add_argument("--parquet", metavar="FILE", help="write one row per call to FILE as Parquet")
    parser.add_argument("--json", action="store_true", help="print the totals as JSON on the last line")


def journal_of(run_dir: str) -> Path:
    path = Path(run_dir)
    journal = path if path.is_file() else path / JOURNAL_FILE
    if not journal.exists():
        raise SystemExit(
            f"no spend journal at {journal}: give the output folder of a train or evaluate run "
            f"(train.output_dir, evaluate.output_dir) or a server's (serve.output_dir), made by this version or later"
        )
    return journal


def summary(books: Books, groups: Sequence[str]) -> dict:
    return {
        "spent_usd": books.spent_usd,
        "billed_calls": len(books.billed),
        "lost_calls": len(books.lost),
        "lost_usd": sum(e["usd"] for e in books.lost),
        "open_calls": len(books.open),
        "at_most_usd": books.at_most_usd,
        "torn_line_offsets": books.skipped,
        "sessions": [{"session": s["session"], "job": s.get("job", ""), "t": s["t"]} for s in books.sessions],
        "by": {g: totals_by(books, g) for g in groups},
    }


def format_summary(figures: dict) -> str:
    lines = [
        f"spent ${figures['spent_usd']:.4f}: {figures['billed_calls']} calls billed, "
        f"{figures['lost_calls']} lost with a crashed process (counted at their worst case, "
        f"${figures['lost_usd']:.4f}); {len(figures['sessions'])} session(s)"
    ]
    if figures["open_calls"]:
        lines.append(
            f"{figures['open_calls']} call(s) open (in flight, or cut off by a crash): at most "
            f"${figures['at_most_usd']:.4f} in all"
        )
    for group, rows in figures["by"].items():
        lines.append(f"\nby {group}:")
        lines.append(f"  {group:<28} {'calls':>7} {'lost':>5} {'input tok':>11} {'output tok':>11} {'USD':>10}")
        for row in rows:
            name = str(row[group]) if row[group] not in ("", None) else "-"
            lines.append(
                f"  {name:<28} {row['calls']:>7} {row['lost']:>5} {row['input_tokens']:>11} "
                f"{row['output_tokens']:>11} {row['usd']:>10.4f}"
            )
    return "\n".join(lines)


def export(books: Books, csv_path: str | None, parquet_path: str | None) -> None:
    rows = call_rows(books)
    if csv_path:
        import csv

        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["status"])
            writer.writeheader()
            writer.writerows(rows)
    if parquet_path:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), parquet_path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="conductor-rl spend", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    books = read_books(journal_of(args.run_dir))
    if books.skipped:
        offsets = ", ".join(str(o) for o in books.skipped[:10])
        print(f"warning: skipped {len(books.skipped)} torn line(s) at byte offset(s) {offsets} (a write cut short)")
    # By default, by worker and by what the job is made of: a training run's iterations, an evaluation's
    # cells, a server's clients.
    evaluation = any(e.get("cell") for e in books.billed)
    figures = summary(books, args.by or ["worker", "cell" if evaluation else "client" if books.requests else "it"])
    export(books, args.csv, args.parquet)
    print(format_summary(figures))
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
