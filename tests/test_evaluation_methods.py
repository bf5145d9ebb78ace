"""Method names of `conductor-rl evaluate` and Conductor checkpoint paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor_rl.evaluation import (
    DEFAULT_METHODS,
    Method,
    MethodError,
    default_methods,
    expand_methods,
    parse_method,
    parse_methods,
    resolve_checkpoint,
)
from conductor_rl.evaluation.methods import KINDS, UPPER_BOUNDS
from conductor_rl.run.checkpoint import Checkpoints

WORKERS = ["gpt-5", "claude", "qwen3:32b"]


def model_folder(folder: Path, weights: str = "model.safetensors") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (folder / weights).write_bytes(b"")
    return folder


def fake_run(root: Path, iterations: tuple[int, ...]) -> Path:
    checkpoints = Checkpoints(root / "checkpoints", keep=10)
    for it in iterations:
        checkpoints.save(it, {"iteration": it}, lambda folder: model_folder(folder / "model"))
    return root


@pytest.mark.parametrize(
    "name, expected",
    [
        ("single:claude", Method("single:claude", "single", worker=1)),
        ("single:qwen3:32b", Method("single:qwen3:32b", "single", worker=2)),
        ("reflect:gpt-5", Method("reflect:gpt-5:5", "reflect", worker=0, rounds=5)),
        ("reflect:gpt-5:3", Method("reflect:gpt-5:3", "reflect", worker=0, rounds=3)),
        ("reflect:qwen3:32b", Method("reflect:qwen3:32b:5", "reflect", worker=2, rounds=5)),
        ("reflect:qwen3:32b:2", Method("reflect:qwen3:32b:2", "reflect", worker=2, rounds=2)),
        (" moa ", Method("moa", "moa")),
        ("router", Method("router", "router")),
        ("random", Method("random", "random")),
        ("oracle", Method("oracle", "oracle")),
        ("oracle-single", Method("oracle-single", "oracle-single")),
        (" optimal", Method("optimal", "optimal")),
        ("conductor:untrained", Method("conductor:untrained", "conductor")),
        ("conductor:untrained@depth=2", Method("conductor:untrained@depth=2", "conductor", depth=2)),
        ("conductor:untrained@depth=0", Method("conductor:untrained@depth=0", "conductor", depth=0)),
    ],
)
def test_parse_method(name, expected):
    assert parse_method(name, WORKERS) == expected


@pytest.mark.parametrize(
    "name, says",
    [
        ("best", "unknown method 'best'; allowed: conductor:"),
        ("single", "unknown method 'single'"),
        ("single:gpt-4", "unknown worker 'gpt-4'; the workers are gpt-5, claude, qwen3:32b"),
        ("reflect:gpt-4:3", "unknown worker 'gpt-4'"),
        ("reflect:gpt-5:0", "rounds must be a whole number from 1 to 20, got '0'"),
        ("reflect:gpt-5:two", "got 'two'"),
        ("reflect:gpt-5:21", "got '21'"),
        ("moa:gpt-5", "moa takes no argument"),
        ("oracle-single:gpt-5", "oracle-single takes no argument; write just 'oracle-single'"),
        ("optimal:3", "optimal takes no argument"),
        ("oracle_single", "allowed: conductor:"),
        ("single:*", "expand_methods"),
        ("conductor:untrained@depth=9", "after '@' write depth=N with N from 0 to 8"),
        ("conductor:untrained@deep=2", "got 'deep=2'"),
        ("conductor:untrained@depth=", "got 'depth='"),
    ],
)
def test_bad_method_names_say_what_is_allowed_on_one_line(name, says):
    with pytest.raises(MethodError) as info:
        parse_method(name, WORKERS)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_every_kind_is_named_in_the_allowed_list_and_the_upper_bounds_are_kinds():
    with pytest.raises(MethodError) as info:
        parse_method("best", WORKERS)
    for kind in KINDS:
        assert kind in str(info.value)
    assert set(UPPER_BOUNDS) == {"oracle", "oracle-single", "optimal"} <= set(KINDS)


def test_expand_methods_writes_out_every_worker_once():
    names = ["single:*", "reflect:*:3", "reflect:*", "moa", "single:claude", "moa"]
    assert expand_methods(names, ["a", "b"]) == [
        "single:a",
        "single:b",
        "reflect:a:3",
        "reflect:b:3",
        "reflect:a",
        "reflect:b",
        "moa",
        "single:claude",
    ]
    # Two spellings of one method are one row.
    methods = parse_methods(["reflect:gpt-5", "reflect:gpt-5:5", "single:*"], WORKERS)
    assert [m.name for m in methods] == ["reflect:gpt-5:5", "single:gpt-5", "single:claude", "single:qwen3:32b"]


def test_default_methods_follow_the_paper(tmp_path):
    assert default_methods(["a", "b"]) == [
        "conductor:untrained",
        "single:a",
        "single:b",
        "reflect:a:5",
        "reflect:b:5",
        "moa",
        "router",
        "random",
        "oracle",
        "oracle-single",
    ]
    run = fake_run(tmp_path / "run", (10,))
    names = default_methods(["a"], checkpoint=str(run))
    assert names[0] == f"conductor:{run}" and len(names) == len(DEFAULT_METHODS) + 1
    assert all(parse_method(n, ["a"]) for n in names)


def test_resolve_checkpoint_of_a_run_picks_its_newest_complete_checkpoint(tmp_path):
    run = fake_run(tmp_path / "run", (10, 20))
    (run / "checkpoints" / "ckpt-000030.partial" / "model").mkdir(parents=True)  # a save cut short
    newest = run / "checkpoints" / "ckpt-000020"
    assert resolve_checkpoint(run) == (newest / "model").resolve()
    assert resolve_checkpoint(run / "checkpoints") == (newest / "model").resolve()
    assert resolve_checkpoint(run / "checkpoints" / "ckpt-000010") == (run / "checkpoints/ckpt-000010/model").resolve()
    method = parse_method(f"conductor:{run}", WORKERS)
    assert method.kind == "conductor" and method.checkpoint == (newest / "model").resolve()
    assert method.name == f"conductor:{run}"


@pytest.mark.parametrize("weights", ["model.safetensors", "model-00001-of-00002.safetensors", "pytorch_model.bin"])
def test_resolve_checkpoint_takes_a_model_folder(tmp_path, weights):
    folder = model_folder(tmp_path / "hf", weights)
    assert resolve_checkpoint(folder) == folder.resolve()


def test_resolve_checkpoint_takes_a_gguf_folder(tmp_path):
    (tmp_path / "smol").mkdir()
    (tmp_path / "smol" / "model.gguf").write_bytes(b"")
    assert resolve_checkpoint(tmp_path / "smol") == (tmp_path / "smol").resolve()


def test_a_folder_that_is_not_a_model_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "config_only").mkdir()
    (tmp_path / "config_only" / "config.json").write_text("{}")
    for folder in ("empty", "config_only"):
        with pytest.raises(MethodError, match="holds no model: a model folder needs config.json"):
            resolve_checkpoint(tmp_path / folder)
    with pytest.raises(MethodError, match="is not a folder"):
        parse_method(f"conductor:{tmp_path / 'missing'}", WORKERS)
    (tmp_path / "run" / "checkpoints" / "ckpt-000005.partial").mkdir(parents=True)
    with pytest.raises(MethodError, match="incomplete"):
        resolve_checkpoint(tmp_path / "run")


def test_a_checkpoint_with_a_depth_is_its_own_method_on_the_same_model(tmp_path):
    run = fake_run(tmp_path / "run", (1,))
    plain, deep = parse_method(f"conductor:{run}", WORKERS), parse_method(f"conductor:{run}@depth=3", WORKERS)
    assert plain.checkpoint == deep.checkpoint and plain.depth is None and deep.depth == 3
    assert deep.name == f"conductor:{run}@depth=3" != plain.name
