"""The on-disk response cache: hits cost nothing, keys follow what determines a
response, entries survive restarts and bad files, and `ask` can use it."""

import asyncio
import json
import os

import pytest

from conductor_rl.config import WorkerConfig
from conductor_rl.testing.workers import ScriptedWorker
from conductor_rl.workers.providers import WorkerRequest, WorkerResponse, cached
from conductor_rl.workers.providers.base import Usage
from conductor_rl.workers.response_cache import ResponseCache


def counting_worker() -> ScriptedWorker:
    """Answers `answer <k>` to its k-th call, with usage and a cost; `requests` counts the calls that reached it."""
    return ScriptedWorker(
        "counting", answer=lambda _, n: f"answer {n + 1}", usage=Usage(input_tokens=10, output_tokens=5), cost_usd=0.01
    )


CONFIG = WorkerConfig(name="w", provider="openai", model="gpt-x", base_url="http://127.0.0.1:1/v1")


def request(text="Hi", temperature=0.2, max_tokens=64):
    return WorkerRequest([{"role": "user", "content": text}], max_tokens=max_tokens, temperature=temperature)


def test_second_identical_call_is_a_free_hit(tmp_path):
    inner = counting_worker()
    worker = cached(inner, CONFIG, str(tmp_path))
    first = asyncio.run(worker.complete(request()))
    second = asyncio.run(worker.complete(request()))
    assert len(inner.requests) == 1 and second.text == first.text == "answer 1"
    assert first.cost_usd == 0.01 and second.cost_usd == 0.0 and second.usage == first.usage
    assert worker.cache.hits == 1


def test_key_follows_messages_sampling_and_model(tmp_path):
    inner = counting_worker()
    worker = cached(inner, CONFIG, str(tmp_path))
    for req in (request(), request(text="Other"), request(temperature=0.7), request(max_tokens=65)):
        asyncio.run(worker.complete(req))
    assert len(inner.requests) == 4
    other_model = cached(inner, CONFIG.model_copy(update={"model": "gpt-y"}), str(tmp_path))
    asyncio.run(other_model.complete(request()))
    assert len(inner.requests) == 5


def test_entries_survive_a_restart_and_bad_files_are_misses(tmp_path):
    asyncio.run(cached(counting_worker(), CONFIG, str(tmp_path)).complete(request()))
    files = list(tmp_path.rglob("*.json"))
    assert len(files) == 1 and not list(tmp_path.rglob("*.tmp"))
    fresh = counting_worker()
    assert asyncio.run(cached(fresh, CONFIG, str(tmp_path)).complete(request())).text == "answer 1"
    assert len(fresh.requests) == 0
    files[0].write_text("{not json")
    assert asyncio.run(cached(fresh, CONFIG, str(tmp_path)).complete(request())).text == "answer 1"
    assert len(fresh.requests) == 1 and json.loads(files[0].read_text())["text"] == "answer 1"  # rewritten


def test_an_entry_is_fsynced_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    cache = ResponseCache(tmp_path)
    key = cache.key({"model": "m"}, request())
    cache.put(key, WorkerResponse(text="première réponse ✓", usage=Usage(input_tokens=1, output_tokens=2)))
    assert cache.get(key).text == "première réponse ✓"
    synced = []
    real_fsync = os.fsync

    def failing_fsync(fd):
        synced.append(fd)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left"):
        cache.put(key, WorkerResponse(text="second", usage=Usage()))
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert synced, "the entry was renamed into place without an fsync"
    assert cache.get(key).text == "première réponse ✓"  # the old entry is whole
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [f"{key}.json"]  # no temporary file left


def test_cache_holds_no_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cache-test-SECRET-123")
    asyncio.run(cached(counting_worker(), CONFIG, str(tmp_path)).complete(request()))
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert "SECRET-123" not in path.read_text()


def test_key_is_stable_across_processes():
    cache_key = ResponseCache.key(None, {"model": "m"}, request())  # no instance state involved
    assert cache_key == ResponseCache.key(None, {"model": "m"}, request()) and len(cache_key) == 64


def test_key_follows_the_reasoning_level_and_the_extra_body(tmp_path):
    inner = counting_worker()
    worker = cached(inner, CONFIG, str(tmp_path))
    plain = request()
    minimal = WorkerRequest(plain.messages, max_tokens=64, temperature=0.2, reasoning="minimal")
    for req in (plain, minimal, minimal):
        asyncio.run(worker.complete(req))
    assert len(inner.requests) == 2
    with_body = cached(inner, CONFIG.model_copy(update={"extra_body": {"top_k": 5}}), str(tmp_path))
    asyncio.run(with_body.complete(plain))
    assert len(inner.requests) == 3
    # A key made before these fields existed is the key of a request that leaves them at their defaults.
    assert ResponseCache.key(None, {"model": "m"}, plain) == ResponseCache.key(
        None, {"model": "m"}, WorkerRequest(plain.messages, 64, 0.2, reasoning="default")
    )


def test_a_hit_keeps_the_reasoning_and_the_finish_reason(tmp_path):
    cache = ResponseCache(tmp_path)
    key = cache.key({"model": "m"}, request())
    cache.put(
        key,
        WorkerResponse(
            text="",
            usage=Usage(output_tokens=64, reasoning_tokens=64),
            reasoning="thinking it through",
            finish_reason="length",
        ),
    )
    hit = cache.get(key)
    assert (hit.text, hit.reasoning, hit.finish_reason, hit.empty_after_length) == (
        "",
        "thinking it through",
        "length",
        True,
    )
    # Entries written before these fields existed still read (as not reported).
    path = next(tmp_path.rglob("*.json"))
    record = json.loads(path.read_text())
    del record["reasoning"], record["finish_reason"]
    path.write_text(json.dumps(record))
    assert (cache.get(key).reasoning, cache.get(key).finish_reason) == ("", "")
