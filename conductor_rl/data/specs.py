"""The dataset specs that `load_dataset` accepts, named once for loaders, error messages and help texts."""

from __future__ import annotations

#: Names accepted by `load_samples`.
SAMPLE_NAMES = ("gsm8k", "math500", "mmlu", "humaneval", "mixed", "heldout")
#: The parts of a sample set: "train" three quarters, "eval" the quarter held out (`load_samples`).
SAMPLE_SPLITS = ("train", "eval")
#: Forms accepted by `load_dataset`, for error messages and help texts.
DATASET_SPEC_FORMS = (
    "samples:<name>[:train|eval]  (name: " + ", ".join(SAMPLE_NAMES) + "; train / eval: a fixed 75 / 25 % split"
    " by question id, disjoint)",
    "gsm8k[:train|test]",
    "math[:train|test]",
    "math500",
    "aime24",
    "aime25",
    "mmlu[:test|train|eval]  (test: all of it; train / eval: its fixed ~20 / 80 % split, disjoint)",
    "mmlu:auxiliary_train[@<path>]  (MMLU's 99,842 training questions, the paper's: from the Hub, or a file in its"
    " schema)",
    "humaneval",
    "mixture:<path>  (a training mixture that `conductor-rl data mix` wrote, one Parquet file)",
    "livecodebench[:v1|v6|<from>..<to>]  (contest dates: v1 2023-05-01..2024-03-31, v6 2025-02-01..2025-05-31,"
    " or YYYY-MM-DD..YYYY-MM-DD)",
    "bigcodebench[:complete|instruct]",
    "gpqa[:diamond|main|extended]  (choices shuffled per question by a fixed seed)",
    "rlpr[:test|train]  (test: RLPR-Evaluation's WebInstruct-verified-val)",
    "<benchmark>[:<split>]@<path>  (gsm8k ... rlpr above: a local file in the benchmark's upstream format,"
    " JSONL / Parquet / CSV)",
    "jsonl:<path>  (one Question per line: id, domain, question, reference, answer_kind, source, meta)",
    "hf:<name>[@<config>][:<split>]  (needs the `datasets` library and the Hugging Face Hub)",
    "<spec>+<spec>[+...]  (several sets, concatenated)",
    "<spec>|<spec>[|...]  (the first that loads here; the others are its offline fallbacks)",
)


#: Dataset names whose questions are code, graded by running them in the sandbox.
CODE_SOURCES = ("humaneval", "livecodebench", "bigcodebench")
#: Forms whose kinds of question are known only once loaded.
OPEN_SOURCES = ("mixture", "jsonl", "hf")


def may_hold_code(spec: str) -> bool:
    """Whether the questions of a dataset spec may include code (so grading them runs untrusted programs)."""
    for part in spec.replace("|", "+").split("+"):
        head = part.strip().split("@", 1)[0].split(":")
        name = head[1] if head[0] == "samples" and len(head) > 1 else head[0]
        if name in CODE_SOURCES or name in OPEN_SOURCES:
            return True
    return False
