"""Benchmark questions: the `Question` record and one loader per source.

`load_dataset` (in `loaders`) dispatches a spec string to the sources: `math`
(GSM8K, MATH, MATH-500, AIME), `mmlu`, `humaneval` and `hub` (``hf:`` specs);
`files` finds and reads their files.

>>> from conductor_rl.data import load_dataset
>>> qs = load_dataset("samples:mixed")          # works without ../shared/data
>>> qs = load_dataset("gsm8k:test", limit=100)   # needs the shared data directory
"""

from .files import ENV_VAR, DataFormatError, data_dir_candidates, iter_jsonl, resolve_data_file
from .hub import HubUnavailableError, load_hf, questions_from_hf_rows
from .humaneval import humaneval_default_path, load_humaneval
from .loaders import load_dataset, load_jsonl, load_samples, samples_dir
from .math import extract_boxed, extract_gsm8k_answer, load_aime, load_gsm8k, load_math, load_math500
from .mmlu import load_mmlu, mmlu_default_path, mmlu_subject_key
from .question import ANSWER_KINDS, DOMAINS, Question
from .specs import DATASET_SPEC_FORMS, SAMPLE_NAMES

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
