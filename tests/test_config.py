"""Settings from RIFFLUX_* variables: the chunk-size bounds and how they interact, the log
cap, the query cache's byte bound."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from rifflux_testing import REPO_ROOT

from rifflux.config import Settings
from rifflux.errors import ConfigError
from rifflux.index.chunker import chunk_markdown
from rifflux.search.service import SearchService


def test_a_maximum_below_the_default_minimum_lowers_the_minimum_with_it() -> None:
    settings = Settings.from_env({"RIFFLUX_MAX_CHUNK_CHARS": "300"})
    assert (settings.max_chunk_chars, settings.min_chunk_chars) == (300, 300)
    text = "# A\n\n" + "\n\n".join(f"## S{n}\n\n" + "word " * 40 for n in range(6))
    chunks = chunk_markdown(
        text, max_chars=settings.max_chunk_chars, min_chars=settings.min_chunk_chars
    )
    assert chunks and all(len(chunk.content) <= 300 for chunk in chunks)


def test_an_explicit_minimum_above_the_maximum_is_refused_in_one_line() -> None:
    env = {"RIFFLUX_MAX_CHUNK_CHARS": "300", "RIFFLUX_MIN_CHUNK_CHARS": "400"}
    with pytest.raises(ConfigError, match=r"RIFFLUX_MIN_CHUNK_CHARS \(400\) must not exceed"):
        Settings.from_env(env)


def test_short_sections_pack_into_one_chunk_under_the_default_minimum() -> None:
    settings = Settings()
    steps = [f"## Step {n}\n\n" + f"Do thing {n} carefully. " * 10 for n in range(4)]
    text = "# Guide\n\nIntro.\n\n" + "\n\n".join(steps)  # sections of ~250 characters
    chunks = chunk_markdown(
        text, max_chars=settings.max_chunk_chars, min_chars=settings.min_chunk_chars
    )
    assert [chunk.heading_path for chunk in chunks] == ["Guide"]
    assert all(f"## Step {n}" in chunks[0].content for n in range(4))
    assert len(chunk_markdown(text, max_chars=1200, min_chars=150)) == 4  # 150: one a step


def test_the_worker_log_cap_is_read_and_must_be_positive() -> None:
    assert Settings().log_max_bytes == 20_000_000
    assert Settings.from_env({"RIFFLUX_LOG_MAX_BYTES": "4096"}).log_max_bytes == 4096
    with pytest.raises(ConfigError, match="RIFFLUX_LOG_MAX_BYTES='0' is invalid"):
        Settings.from_env({"RIFFLUX_LOG_MAX_BYTES": "0"})


def test_the_query_cache_byte_bound_is_read_in_mib_and_zero_turns_the_cache_off() -> None:
    assert Settings().query_cache_max_mb == 32
    settings = Settings.from_env({"RIFFLUX_QUERY_CACHE_MAX_MB": "0"})
    assert not SearchService(settings).query_cache.enabled
    settings = Settings.from_env({"RIFFLUX_QUERY_CACHE_MAX_MB": "3"})
    assert SearchService(settings).query_cache.max_bytes == 3 * 2**20
    with pytest.raises(ConfigError, match="RIFFLUX_QUERY_CACHE_MAX_MB='-1' is invalid"):
        Settings.from_env({"RIFFLUX_QUERY_CACHE_MAX_MB": "-1"})


def test_the_default_pool_follows_the_cpu_affinity_mask() -> None:
    """A process pinned to one CPU (taskset, a container's cpuset) starts one worker with
    one ONNX thread, whatever os.cpu_count() says."""
    probe = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from rifflux.config import Settings; from workers.launcher import "
        "onnx_threads_per_worker; s = Settings(); "
        "print(s.workers, s.http_workers, onnx_threads_per_worker(s, s.workers))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1", "1"]
