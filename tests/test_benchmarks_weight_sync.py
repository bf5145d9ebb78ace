"""benchmarks/weight_sync.py's dry run (quick: no Ray, vLLM or model): its arguments and the JSON
shape a CPU or GPU run fills in, which benchmarks/policy.py's `weight_sync` shares."""

from __future__ import annotations

import json
import sys

import pytest

from tests.benchmark_scripts import load_benchmark


def test_the_dry_run_prints_every_figure_a_run_fills_in(monkeypatch, capsys) -> None:
    bench = load_benchmark("weight_sync")
    monkeypatch.setattr(sys, "argv", ["weight_sync.py", "--dry-run", "--json", "--transports", "ipc,nccl"])
    assert bench.main() == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    figures = result["weight_sync"]
    assert result["dry_run"] and result["model"] == "smollm2-135m"
    assert list(figures["transports"]) == ["ipc", "nccl"]
    assert set(figures["transports"]["ipc"]) == set(bench.TRANSPORT_KEYS)
    assert figures["goal_sync_over_copy_floor"] == 2.0 and "sync_over_copy_floor" in figures
    for part in ("handover_s", "engine_load_s", "cache_reset_s", "actor_hop_s", "reload_weights_s"):
        assert part in figures["breakdown"]
    assert set(figures["breakdown"]["engine"]) >= {"load_s", "repack_s", "views"}


def test_bad_arguments_are_refused(monkeypatch) -> None:
    bench = load_benchmark("weight_sync")
    monkeypatch.setattr(sys, "argv", ["weight_sync.py", "--dry-run", "--syncs", "0"])
    with pytest.raises(SystemExit):
        bench.main()
