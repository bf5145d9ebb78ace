"""The training mixture: which candidate questions the Conductor trains on, chosen by
a pilot run's verdicts (did each worker solve it alone?), stored as one Parquet file.

The paper trains on 960 questions and says only that they are "diverse and
difficult". Our rule, `select_mixture` (decisions where the paper is silent):

1. Informative questions only. A candidate needs a verdict from every worker;
   one that every worker solves, or none does, is dropped: any plan (or no
   plan) gets the same reward there, so it teaches nothing about routing.
2. Copies are one question: of candidates with the same text (`text_key`),
   the one with the smallest id stays.
3. Domains weigh the same: `total` is split evenly over the domains present
   (the remainder one each to the first domains by name); a domain with fewer
   questions than its share gives all it has, and what it leaves is split
   evenly over the others, again until every share fits.
4. Diversity within a domain: its questions fall into strata (`stratum_of`:
   MATH and MATH-500 by level, MMLU by subject, LiveCodeBench by difficulty,
   any other source is one stratum), and picks go round-robin over the strata,
   in a seeded shuffled order of strata; a stratum that runs out is skipped.
5. Difficulty within a stratum: fewer solving workers first; ties in a seeded
   shuffled order (shuffled from id order, so the candidates' order does not
   matter).
6. The result interleaves the domains (one from each, by domain name, in
   turn), so any prefix of it (``limit=N``) is balanced too.

The same candidates, verdicts, total and seed give the same list. Fewer than
`total` come back when fewer are informative.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from itertools import zip_longest
from pathlib import Path
from typing import Any

from conductor_rl.atomic_files import write_atomically

from .files import DataFormatError, check_limit
from .overlap import text_key
from .question import FIELDS, Question

#: The rule, as written into the mixture file's metadata.
RULE = (
    "informative only (solved by some but not all workers, verdicts from all); one per text; "
    "total split evenly over domains, a short domain's remainder spread over the others; "
    "round-robin over strata (MATH/MATH-500 level, MMLU subject, LiveCodeBench difficulty, else source) "
    "in a seeded order; within a stratum fewer solvers first, ties seeded; domains interleaved"
)
#: The Parquet file's metadata key (a JSON object: rule, workers, counts, info).
METADATA_KEY = b"conductor_rl.mixture"
#: Per source, the meta field that names a question's stratum.
STRATUM_FIELDS = {"math": "level", "math500": "level", "mmlu": "subject", "livecodebench": "difficulty"}
_SOLVED = "pilot_solved"


def stratum_of(question: Question) -> str:
    """The stratum a question is balanced within: ``"math/level=3"``, ``"mmlu/subject=anatomy"``,
    ``"livecodebench/difficulty=easy"``, or its source (``"gsm8k"``)."""
    field = STRATUM_FIELDS.get(question.source)
    if field is None:
        return question.source
    value = question.meta.get(field)
    return f"{question.source}/{field}={'?' if value is None else value}"


def solved_count(question_id: str, verdicts: Mapping[str, Mapping[str, bool]], workers: Sequence[str]) -> int | None:
    """How many of `workers` solved the question; None unless every one has a verdict."""
    given = verdicts.get(question_id, {})
    if any(w not in given for w in workers):
        return None
    for worker in workers:
        if given[worker] not in (True, False):
            raise TypeError(f"verdicts[{question_id!r}][{worker!r}] must be a bool, got {given[worker]!r}")
    return sum(bool(given[w]) for w in workers)


def domain_quotas(available: Mapping[str, int], total: int) -> dict[str, int]:
    """`total` split evenly over the domains of `available` (name -> questions there), water-filling:
    a domain that has less than its share gets all it has, the rest goes to the others."""
    quotas: dict[str, int] = {}
    open_domains = sorted(d for d, n in available.items() if n > 0)
    remaining = total
    while open_domains:
        share, extra = divmod(remaining, len(open_domains))
        short = [d for d in open_domains if available[d] <= share]
        if not short:  # every open domain has more than `share`, so share + 1 fits too
            quotas.update({d: share + (i < extra) for i, d in enumerate(open_domains)})
            break
        for d in short:
            quotas[d] = available[d]
            remaining -= available[d]
            open_domains.remove(d)
    return quotas


def _rng(seed: int, *names: str) -> random.Random:
    # A str seed is hashed with SHA-512 by `random`: the same on every run, whatever PYTHONHASHSEED.
    return random.Random(":".join(("conductor-rl-mixture", str(seed), *names)))


def _pick_domain(
    questions: list[Question], solved: Mapping[str, int], quota: int, seed: int, domain: str
) -> list[Question]:
    strata: dict[str, list[Question]] = defaultdict(list)
    for q in sorted(questions, key=lambda q: q.id):
        strata[stratum_of(q)].append(q)
    queues = []
    for name in sorted(strata):
        members = strata[name]
        _rng(seed, domain, name).shuffle(members)
        members.sort(key=lambda q: solved[q.id])  # stable: the shuffle breaks ties
        queues.append(members)
    _rng(seed, domain).shuffle(queues)
    picked: list[Question] = []
    for round_ in zip_longest(*queues):
        for q in round_:
            if q is not None and len(picked) < quota:
                picked.append(q)
    return picked


def select_mixture(
    candidates: Sequence[Question],
    verdicts: Mapping[str, Mapping[str, bool]],
    total: int = 960,
    seed: int = 0,
    *,
    workers: Sequence[str] | None = None,
) -> list[Question]:
    """The training mixture by the module's rule; `verdicts[question_id][worker]` is
    whether that worker solved it in the pilot. `workers`: whose verdicts count
    (default: every worker named in `verdicts`)."""
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError(f"total must be a non-negative int, got {total!r}")
    workers = sorted({w for given in verdicts.values() for w in given}) if workers is None else list(workers)
    if not workers:
        raise ValueError("no worker verdicts: run the pilot first (verdicts[question_id][worker] = solved)")
    twice = [qid for qid, n in Counter(q.id for q in candidates).items() if n > 1]
    if twice:
        raise ValueError(f"candidate id(s) {twice[:5]} appear twice; candidates must have distinct ids")
    solved: dict[str, int] = {}
    by_text: dict[str, Question] = {}
    for q in sorted(candidates, key=lambda q: q.id):
        n = solved_count(q.id, verdicts, workers)
        if n is None or n in (0, len(workers)):
            continue
        solved[q.id] = n
        by_text.setdefault(text_key(q.question), q)
    by_domain: dict[str, list[Question]] = defaultdict(list)
    for q in by_text.values():
        by_domain[q.domain].append(q)
    quotas = domain_quotas({d: len(qs) for d, qs in by_domain.items()}, total)
    picks = [_pick_domain(by_domain[d], solved, quotas[d], seed, d) for d in sorted(quotas)]
    return [q for round_ in zip_longest(*picks) for q in round_ if q is not None]


def mixture_report(
    questions: Sequence[Question], verdicts: Mapping[str, Mapping[str, bool]], workers: Sequence[str]
) -> dict[str, Any]:
    """Counts per domain and per stratum, how many questions k workers solved, and each
    worker's pilot solve rate over `questions` (for `conductor-rl data mix`'s summary)."""
    strata: dict[str, Counter] = defaultdict(Counter)
    for q in questions:
        strata[q.domain][stratum_of(q)] += 1
    solved_by: Counter[str] = Counter()
    for q in questions:
        n = solved_count(q.id, verdicts, workers)
        solved_by["no verdict" if n is None else str(n)] += 1
    rates = {}
    for worker in workers:
        given = [verdicts[q.id][worker] for q in questions if worker in verdicts.get(q.id, {})]
        rates[worker] = round(sum(map(bool, given)) / len(given), 4) if given else None
    return {
        "questions": len(questions),
        "domains": {d: sum(c.values()) for d, c in sorted(strata.items())},
        "strata": {d: dict(sorted(c.items())) for d, c in sorted(strata.items())},
        "solved_by": dict(sorted(solved_by.items(), key=lambda kv: (len(kv[0]), kv[0]))),  # "2" before "10"
        "solve_rate": rates,
    }


def _check_workers(workers: Sequence[str]) -> list[str]:
    workers = list(workers)
    if not workers or len(set(workers)) != len(workers) or not all(isinstance(w, str) and w for w in workers):
        raise ValueError(f"workers must be distinct non-empty names, got {workers!r}")
    if "solved" in workers:
        raise ValueError(f"a worker named 'solved' would clash with the column {_SOLVED!r}; rename it")
    return workers


def write_mixture(
    path: str | os.PathLike,
    questions: Sequence[Question],
    verdicts: Mapping[str, Mapping[str, bool]],
    workers: Sequence[str],
    info: Mapping[str, Any],
) -> Path:
    """Write the mixture as one Parquet file, atomically: the Question fields (``meta`` as
    JSON), ``pilot_<worker>`` (bool) per worker and ``pilot_solved`` (int); the file's
    metadata holds the rule, the counts (`mixture_report`) and `info` (JSON)."""
    import pyarrow as pa  # here: importing conductor_rl.data stays light
    import pyarrow.parquet as pq

    workers = _check_workers(workers)
    columns: dict[str, list] = {name: [getattr(q, name) for q in questions] for name in FIELDS[:-1]}
    columns["meta"] = [json.dumps(q.meta, ensure_ascii=False, sort_keys=True) for q in questions]
    counts = []
    for q in questions:
        n = solved_count(q.id, verdicts, workers)
        if n is None:
            missing = [w for w in workers if w not in verdicts.get(q.id, {})]
            raise ValueError(f"question {q.id!r} has no pilot verdict from {missing}; every worker must have one")
        counts.append(n)
    for worker in workers:
        columns[f"pilot_{worker}"] = [bool(verdicts[q.id][worker]) for q in questions]
    columns[_SOLVED] = counts
    try:
        metadata = json.dumps(
            {
                "version": 1,
                "rule": RULE,
                "workers": workers,
                "counts": mixture_report(questions, verdicts, workers),
                "info": dict(info),
            }
        )
    except TypeError as exc:
        raise TypeError(f"info must be JSON-serialisable: {exc}") from None
    types = {
        **{name: pa.string() for name in FIELDS},
        **{f"pilot_{w}": pa.bool_() for w in workers},
        _SOLVED: pa.int32(),
    }
    schema = pa.schema([pa.field(name, types[name]) for name in columns], metadata={METADATA_KEY: metadata})
    table = pa.table(columns, schema=schema)
    file = Path(path).expanduser()
    file.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(file, lambda out: pq.write_table(table, out, compression="zstd"), binary=True)
    return file


def read_mixture(path: str | os.PathLike) -> tuple[list[Question], dict[str, dict[str, bool]], dict[str, Any]]:
    """(questions, verdicts, metadata) from a file `write_mixture` wrote."""
    import pyarrow.parquet as pq

    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(
            f"training mixture not found: {file}. Run `conductor-rl data mix --config <the run's config>` "
            "first: it runs the pilot and writes this file."
        )
    try:
        table = pq.read_table(file)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError, its IO errors OSErrors
        raise DataFormatError(file, None, f"not a readable Parquet file: {exc}") from None
    missing = [name for name in (*FIELDS, _SOLVED) if name not in table.column_names]
    if missing:
        raise DataFormatError(file, None, f"not a training mixture: no column(s) {missing}")
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    metadata = json.loads(raw) if raw else {}
    workers = [
        name.removeprefix("pilot_") for name in table.column_names if name.startswith("pilot_") and name != _SOLVED
    ]
    questions, verdicts = [], {}
    for i, row in enumerate(table.to_pylist()):
        try:
            q = Question.from_dict({**{k: row[k] for k in FIELDS[:-1]}, "meta": json.loads(row["meta"])})
        except (TypeError, ValueError) as exc:
            raise DataFormatError(file, None, f"row {i}: {exc}") from None
        questions.append(q)
        verdicts[q.id] = {w: bool(row[f"pilot_{w}"]) for w in workers}
    return questions, verdicts, metadata


def load_pilot_verdicts(path: str | os.PathLike) -> dict[str, dict[str, bool]]:
    """The pilot's verdicts stored in a mixture file: ``{question_id: {worker: solved}}``,
    for the mixture's questions."""
    return read_mixture(path)[1]


def load_mixture(path: str | os.PathLike, limit: int | None = None) -> list[Question]:
    """The questions of a training mixture file (``mixture:<path>``), in its order."""
    limit = check_limit(limit)
    questions = read_mixture(path)[0]
    return questions if limit is None else questions[:limit]
