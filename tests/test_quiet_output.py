"""A quiet first run: `conductor-rl train` prints its own progress and summary, not the libraries'
progress bars (model conversion) or routine INFO lines and warnings; CONDUCTOR_RL_VERBOSE=1 (or
`conductor-rl --verbose`) brings them back. Fast: no model is loaded, no cluster started."""

from __future__ import annotations

import importlib.util
import logging
import os
import warnings
from pathlib import Path

import pytest

from conductor_rl.models import VERBOSE_ENV, _quiet_conversion, quiet_model_libraries, verbose
from jobs.common import quiet_third_party_output

DTYPE_LOGGER = "vllm.model_executor.models.utils"
RAY_WORKER_LOGGER = "ray._private.worker"


def package_source(module: str) -> str:
    """The text of a library module, read without importing it (vLLM's import alone takes seconds)."""
    top, *rest = module.split(".")
    root = Path(importlib.util.find_spec(top).submodule_search_locations[0])
    return root.joinpath(*rest[:-1], rest[-1] + ".py").read_text(encoding="utf-8")


@pytest.fixture
def quiet(monkeypatch):
    monkeypatch.delenv(VERBOSE_ENV, raising=False)


def convert_with_bars() -> None:
    """What a conversion shows: the GGUF reader's own tqdm bar, then transformers' bars."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as transformers_logging

    for _ in gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."):
        pass
    for _ in transformers_logging.tqdm(range(3), desc="Writing model shards"):
        pass


def test_a_model_conversion_prints_one_line_of_ours_instead_of_progress_bars(quiet, tmp_path, capfd):
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as transformers_logging

    original = gguf_utils.tqdm
    with _quiet_conversion("smollm2-135m", tmp_path / "smollm2-135m"):
        convert_with_bars()
    err = capfd.readouterr().err
    target = tmp_path / "smollm2-135m"
    assert err.splitlines() == [f"preparing the smollm2-135m model once (converted into {target}) ..."], err
    # Only for the conversion: the bars of everything else are as they were.
    assert gguf_utils.tqdm is original and transformers_logging.is_progress_bar_enabled()


def test_verbose_keeps_the_conversion_bars(monkeypatch, tmp_path, capfd):
    monkeypatch.setenv(VERBOSE_ENV, "1")
    assert verbose()
    with _quiet_conversion("smollm2-135m", tmp_path / "smollm2-135m"):
        convert_with_bars()
    err = capfd.readouterr().err
    assert "Converting and de-quantizing GGUF tensors..." in err and "Writing model shards" in err, err


def test_the_policy_actors_drop_only_the_named_expected_library_lines(quiet, monkeypatch):
    from transformers.utils import logging as transformers_logging

    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    dtype_logger = logging.getLogger(DTYPE_LOGGER)
    filters = list(dtype_logger.filters)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            quiet_model_libraries()
            warnings.warn(
                "`torch.distributed.reduce_op` is deprecated, please use `torch.distributed.ReduceOp` instead",
                FutureWarning,
                stacklevel=1,
            )
            warnings.warn("some other deprecation", FutureWarning, stacklevel=1)
        assert [str(w.message) for w in caught] == ["some other deprecation"]
        assert not transformers_logging.is_progress_bar_enabled()
        assert os.environ["VLLM_LOGGING_LEVEL"] == "WARNING"  # vLLM's warnings and errors still show
        narrowing = dtype_logger.makeRecord(
            DTYPE_LOGGER,
            logging.WARNING,
            __file__,
            1,
            "Attempted to load weight %s with dtype %s into parameter with dtype %s",
            ("layers.0.mlp.down_proj.weight", "torch.float32", "torch.bfloat16"),
            None,
        )
        other = dtype_logger.makeRecord(DTYPE_LOGGER, logging.WARNING, __file__, 1, "something else", (), None)
        assert not dtype_logger.filter(narrowing) and dtype_logger.filter(other)
    finally:
        transformers_logging.enable_progress_bar()
        dtype_logger.filters[:] = filters


def test_the_silenced_lines_still_come_from_where_we_silence_them():
    """If a library moves one of these lines, the silencing above stops working: fail here, not in a user's run."""
    assert '"Attempted to load weight %s with dtype %s into "' in package_source(DTYPE_LOGGER)
    worker = package_source(RAY_WORKER_LOGGER)
    assert 'info_str = "Started a local Ray instance."' in worker and "logger = logging.getLogger(__name__)" in worker
    assert "from tqdm.auto import tqdm" in package_source("transformers.modeling_gguf_pytorch_utils")


def test_commands_keep_rays_startup_info_line_out_unless_verbose(quiet, monkeypatch):
    ray_worker = logging.getLogger(RAY_WORKER_LOGGER)
    level = ray_worker.level
    try:
        quiet_third_party_output()
        assert not ray_worker.isEnabledFor(logging.INFO) and ray_worker.isEnabledFor(logging.WARNING)
        ray_worker.setLevel(logging.NOTSET)
        monkeypatch.setenv(VERBOSE_ENV, "1")
        quiet_third_party_output()
        assert ray_worker.level == logging.NOTSET
    finally:
        ray_worker.setLevel(level)


def test_verbose_flag_before_the_command_turns_verbose_on(quiet, capsys):
    from jobs.cli import main

    assert main(["--verbose", "config", "train.iterations=2"]) == 0
    assert verbose()
    assert "iterations: 2" in capsys.readouterr().out
