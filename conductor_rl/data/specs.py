"""The dataset specs that `load_dataset` accepts, named once for loaders, error messages and help texts."""

from __future__ import annotations

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
