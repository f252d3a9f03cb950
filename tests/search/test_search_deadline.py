"""Every search runs under RIFFLUX_SEARCH_TIMEOUT_SECONDS (issue 20, finding 1).

Real indexes, real SQLite: a deadline that passes inside SQLite interrupts the running
statement (progress handler), one that passes between Python steps stops at the next
check; either way the call fails with one line and the thread's connection answers the
next search exactly as a fresh service does.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rifflux_testing import REPO_ROOT, copy_corpus, make_settings

from rifflux.config import Settings
from rifflux.errors import ConfigError, SearchTimeoutError
from rifflux.index.indexer import Indexer
from rifflux.search import deadline as deadline_module
from rifflux.search.deadline import Deadline
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService

MESSAGE = (
    "search timed out after {} s (RIFFLUX_SEARCH_TIMEOUT_SECONDS); narrow the query or filters"
)
REQUESTS = [
    SearchRequest("azure deployment review", mode="lexical", top_k=5),
    SearchRequest("azure deployment review", mode="semantic", top_k=5),
    SearchRequest("azure deployment review", top_k=5, content_contains="the"),
    SearchRequest("agent instructions", top_k=5, path_glob="**/a*", max_tokens=300),
    SearchRequest("agent instructions", top_k=5, group_by="file", path_glob="**/" * 3 + "*.md"),
]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("deadline")
    corpus = copy_corpus(root / "docs", limit=25)
    settings = make_settings(root, query_cache_size=0)
    Indexer(settings).run([corpus])
    return settings


def results(service: SearchService, request: SearchRequest) -> list[dict[str, Any]]:
    return list(service.search_response(request)["results"])


def counting_clock() -> Any:
    """A clock that advances one unit each time it is read."""
    ticks = itertools.count()
    return lambda: float(next(ticks))


def test_a_search_past_its_deadline_is_one_line(index: Settings) -> None:
    service = SearchService(index.with_overrides(search_timeout_seconds=1e-9))
    try:
        for request in REQUESTS:
            with pytest.raises(SearchTimeoutError) as raised:
                service.search_response(request)
            assert str(raised.value) == MESSAGE.format("1e-09")
        with pytest.raises(SearchTimeoutError):
            service.search("azure", top_k=500)
    finally:
        service.close()


def test_sqlite_work_is_interrupted_and_the_connection_serves_the_next_search(
    index: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deadline_module, "PROGRESS_OPS", 1)
    fresh = SearchService(index)
    service = SearchService(index)
    try:
        want = [results(fresh, r) for r in REQUESTS]
        conn = service.connection()
        # Python steps read the clock a handful of times; SQLite's handler on every
        # instruction: a deadline of 40 reads passes inside an SQLite statement.
        monkeypatch.setattr(service, "deadline", lambda: Deadline(40, clock=counting_clock()))
        with pytest.raises(SearchTimeoutError) as raised:
            service.search_response(REQUESTS[2])
        cause = raised.value.__cause__
        assert isinstance(cause, sqlite3.OperationalError) and "interrupted" in str(cause)
        assert not conn.in_transaction
        monkeypatch.undo()
        assert service.connection() is conn
        assert [results(service, r) for r in REQUESTS] == want
    finally:
        fresh.close()
        service.close()


def test_a_deadline_passing_at_any_point_fails_cleanly(
    index: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sweep the moment the deadline passes over every clock read of each search."""
    monkeypatch.setattr(deadline_module, "PROGRESS_OPS", 50)
    fresh = SearchService(index)
    service = SearchService(index)
    try:
        for request in REQUESTS:
            want = results(fresh, request)
            timed_out = 0
            for reads in range(0, 400, 7):
                clock = counting_clock()
                monkeypatch.setattr(
                    service, "deadline", lambda c=clock, r=reads: Deadline(r, clock=c)
                )
                try:
                    got = results(service, request)
                except SearchTimeoutError as exc:
                    assert str(exc) == MESSAGE.format(reads)
                    timed_out += 1
                else:
                    assert got == want
                assert not service.connection().in_transaction
            assert timed_out >= 2, request
            monkeypatch.setattr(service, "deadline", SearchService.deadline.__get__(service))
            assert results(service, request) == want
    finally:
        fresh.close()
        service.close()


def test_the_setting_is_read_and_checked() -> None:
    assert Settings.from_env({}).search_timeout_seconds == 10.0
    env = {"RIFFLUX_SEARCH_TIMEOUT_SECONDS": "2.5"}
    assert Settings.from_env(env).search_timeout_seconds == 2.5
    for bad in ("0", "-1", "soon", "nan"):
        with pytest.raises(ConfigError, match="RIFFLUX_SEARCH_TIMEOUT_SECONDS"):
            Settings.from_env({"RIFFLUX_SEARCH_TIMEOUT_SECONDS": bad})


def test_the_cli_prints_the_timeout_as_one_line(index: Settings) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RIFFLUX_", "RIFLUX_"))}
    env.update(
        RIFFLUX_EMBEDDING_BACKEND="hash",
        RIFFLUX_SEARCH_TIMEOUT_SECONDS="0.000001",
        PYTHONPATH=str(REPO_ROOT),
    )
    result = subprocess.run(
        [sys.executable, "-m", "rifflux.cli", "search", "azure", "--db", str(index.db_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr == "rifflux: error: " + MESSAGE.format("1e-06") + "\n"


def test_a_deadline_without_sqlite_work_checks_between_steps(tmp_path: Path) -> None:
    deadline = Deadline(5, clock=counting_clock())
    for _ in range(4):
        deadline.check()
    with pytest.raises(SearchTimeoutError, match="after 5 s"):
        deadline.check()
