"""Benchmark questions: the `Question` record and one loader per source.

`load_dataset` (in `loaders`) dispatches a spec string to the sources: `math`
(GSM8K, MATH, MATH-500, AIME), `mmlu`, `humaneval`, `livecodebench`,
`bigcodebench`, `gpqa` (domain ``science``), `rlpr` (domain ``reasoning``) and
`hub` (``hf:`` specs); `files` finds and reads their files (JSONL, Parquet,
CSV). `overlap` refuses evaluation questions that the training data contains
(`check_disjoint`); `mixture` selects and stores the training mixture;
`difficulty` puts a question on a coarse scale from easy to hard.

>>> from conductor_rl.data import load_dataset
>>> qs = load_dataset("samples:mixed")          # works without ../shared/data
>>> qs = load_dataset("gsm8k:test", limit=100)   # needs the shared data directory
>>> qs = load_dataset("gpqa@/data/gpqa_diamond.csv")   # any benchmark: a file in its upstream format
"""

from .bigcodebench import bigcodebench_question, load_bigcodebench
from .difficulty import HARD_FROM, band_of, difficulty_of, is_hard
from .files import (
    ENV_VAR,
    DataFormatError,
    data_dir_candidates,
    iter_jsonl,
    iter_rows,
    resolve_benchmark_file,
    resolve_data_file,
)
from .gpqa import GPQA_SEED, gpqa_permutation, gpqa_question, load_gpqa
from .hub import HubUnavailableError, load_hf, questions_from_hf_rows
from .humaneval import humaneval_default_path, load_humaneval
from .livecodebench import LCB_WINDOWS, lcb_question, lcb_window, load_livecodebench
from .loaders import load_available, load_dataset, load_first, load_jsonl, load_samples, samples_dir
from .math import extract_boxed, extract_gsm8k_answer, load_aime, load_gsm8k, load_math, load_math500
from .mixture import load_mixture, select_mixture, write_mixture
from .mmlu import load_mmlu, mmlu_default_path, mmlu_part, mmlu_subject_key
from .overlap import ContaminationError, check_disjoint, find_overlap, text_key
from .question import ANSWER_KINDS, DOMAINS, Question
from .rlpr import load_rlpr, rlpr_question
from .specs import DATASET_SPEC_FORMS, SAMPLE_NAMES

__all__ = [
    "ANSWER_KINDS",
    "DATASET_SPEC_FORMS",
    "DOMAINS",
    "ENV_VAR",
    "GPQA_SEED",
    "HARD_FROM",
    "LCB_WINDOWS",
    "SAMPLE_NAMES",
    "ContaminationError",
    "DataFormatError",
    "HubUnavailableError",
    "Question",
    "band_of",
    "bigcodebench_question",
    "check_disjoint",
    "data_dir_candidates",
    "difficulty_of",
    "extract_boxed",
    "extract_gsm8k_answer",
    "find_overlap",
    "gpqa_permutation",
    "gpqa_question",
    "humaneval_default_path",
    "is_hard",
    "iter_jsonl",
    "iter_rows",
    "lcb_question",
    "lcb_window",
    "load_aime",
    "load_available",
    "load_bigcodebench",
    "load_dataset",
    "load_first",
    "load_gpqa",
    "load_gsm8k",
    "load_hf",
    "load_humaneval",
    "load_jsonl",
    "load_livecodebench",
    "load_math",
    "load_math500",
    "load_mixture",
    "load_mmlu",
    "load_rlpr",
    "load_samples",
    "mmlu_default_path",
    "mmlu_part",
    "mmlu_subject_key",
    "questions_from_hf_rows",
    "resolve_benchmark_file",
    "resolve_data_file",
    "rlpr_question",
    "samples_dir",
    "select_mixture",
    "text_key",
    "write_mixture",
]
