"""Benchmark questions: the `Question` record and one loader per source.

>>> from conductor_rl.data import load_dataset
>>> qs = load_dataset("samples:mixed")          # works without ../shared/data
>>> qs = load_dataset("gsm8k:test", limit=100)   # needs the shared data directory
"""

from .loaders import (
    DATASET_SPEC_FORMS,
    ENV_VAR,
    SAMPLE_NAMES,
    DataFormatError,
    HubUnavailableError,
    data_dir_candidates,
    extract_boxed,
    extract_gsm8k_answer,
    humaneval_default_path,
    iter_jsonl,
    load_aime,
    load_dataset,
    load_gsm8k,
    load_hf,
    load_humaneval,
    load_jsonl,
    load_math,
    load_math500,
    load_mmlu,
    load_samples,
    mmlu_default_path,
    mmlu_subject_key,
    questions_from_hf_rows,
    resolve_data_file,
    samples_dir,
)
from .question import ANSWER_KINDS, DOMAINS, Question

__all__ = [
    "ANSWER_KINDS",
    "DATASET_SPEC_FORMS",
    "DOMAINS",
    "ENV_VAR",
    "SAMPLE_NAMES",
    "DataFormatError",
    "HubUnavailableError",
    "Question",
    "data_dir_candidates",
    "extract_boxed",
    "extract_gsm8k_answer",
    "humaneval_default_path",
    "iter_jsonl",
    "load_aime",
    "load_dataset",
    "load_gsm8k",
    "load_hf",
    "load_humaneval",
    "load_jsonl",
    "load_math",
    "load_math500",
    "load_mmlu",
    "load_samples",
    "mmlu_default_path",
    "mmlu_subject_key",
    "questions_from_hf_rows",
    "resolve_data_file",
    "samples_dir",
]
