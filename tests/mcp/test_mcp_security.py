"""Findings 1-3 of the security issue, as a hostile client would try them: real sessions.

1. ``reindex`` of a key outside the server's directory, or of ``/``;
2. a symlink inside an indexed root pointing out of it (and a file swapped for one);
3. ``search_rifflux`` with ``db_path`` naming a file that is not a Rifflux index.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    build_tree,
    call_error,
    call_ok,
    server_command,
    stdio_session,
)

from rifflux.index.denied import secret_reason
from rifflux.index.scan import SYMLINK_OUTSIDE

pytestmark = pytest.mark.anyio

CALL_TIMEOUT_S = 90
SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- zebracorn"
DIARY = "# Diary\n\nThe password is platypus-lantern.\n"


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    return await call_error(session, tool, timeout=CALL_TIMEOUT_S, **arguments)


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    return await call_ok(session, tool, timeout=CALL_TIMEOUT_S, **arguments)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def hostile_tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    """An indexed tree in ``base/work`` with ``base/secret`` beside it, and links out."""
    base = tmp_path_factory.mktemp("hostile")
    secret = base / "secret"
    secret.mkdir()
    (secret / "id_rsa").write_text(SECRET + "\n")
    (secret / "diary.md").write_text(DIARY)
    (secret / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    tree = build_tree(base / "work")
    notes = tree.root / "notes"
    os.symlink("../../secret/diary.md", notes / "leak.md")
    os.symlink(secret, notes / "secret-dir")
    os.symlink("/proc/version", notes / "proc.md")
    return tree


@pytest.fixture(scope="module")
async def session(hostile_tree: IndexedTree) -> AsyncIterator[ClientSession]:
    async with stdio_session(hostile_tree) as client:
        yield client


async def test_reindex_outside_the_allowed_roots_is_refused(
    session: ClientSession, hostile_tree: IndexedTree
) -> None:
    root = hostile_tree.root
    secret = root.parent / "secret"
    for arguments in (
        {"path": str(secret / "id_rsa")},
        {"path": "/"},
        {"paths": [str(root / "docs"), str(secret)]},
    ):
        message = await refused(session, "reindex", **arguments)
        assert message.endswith(
            f"is outside the allowed roots ({root}); pass a path inside them (relative paths "
            f"are read from {root})"
        )
    # Where a relative path led, and from where: the roots are not what was wrong.
    assert await refused(session, "reindex", path="../secret") == (
        f"'../secret' (resolves to {secret}) is outside the allowed roots ({root}); "
        f"paths are relative to {root}"
    )
    status = await ok(session, "index_status")
    assert status["files"] == 3
    assert all(str(secret) not in " ".join(job["roots"]) for job in status["recent_jobs"])
    message = await refused(session, "get_file", path=str(secret / "id_rsa"))
    assert "is not an indexed file" in message


async def test_symlinks_out_of_the_root_are_skipped_with_a_reason_and_never_served(
    session: ClientSession, hostile_tree: IndexedTree
) -> None:
    result = await ok(session, "reindex", path="notes")
    assert result["indexed_files"] == 0
    assert sorted(s["path"] for s in result["skipped"]) == [
        "notes/leak.md",
        "notes/proc.md",
        "notes/secret-dir",
    ]
    assert {s["reason"] for s in result["skipped"]} == {SYMLINK_OUTSIDE}
    for query in ("platypus lantern password", "Linux version", "zebracorn"):
        hits = (await ok(session, "search_rifflux", query=query, mode="lexical"))["results"]
        assert all(hit["path"].startswith(("docs/", "notes/gardening")) for hit in hits), hits
    for path in ("notes/leak.md", "notes/secret-dir/diary.md", "notes/proc.md"):
        assert "is not an indexed file" in await refused(session, "get_file", path=path)


async def test_get_file_refuses_an_indexed_file_swapped_for_a_symlink_out(
    session: ClientSession, hostile_tree: IndexedTree
) -> None:
    swapped = hostile_tree.root / "swap.md"
    swapped.write_text("# Swap\n\nHarmless words about kites.\n")
    await ok(session, "reindex", path="swap.md")
    assert (await ok(session, "get_file", path="swap.md"))["file"]["path"] == "swap.md"
    chunk_id = (await ok(session, "get_file", path="swap.md"))["file"]["chunks"][0]["chunk_id"]
    swapped.unlink()
    os.symlink(hostile_tree.root.parent / "secret" / "diary.md", swapped)
    message = await refused(session, "get_file", path="swap.md")
    assert "'swap.md' is indexed but lies outside the allowed roots" in message
    assert "lies outside the allowed roots" in await refused(
        session, "get_chunk", chunk_id=chunk_id
    )
    result = await ok(session, "reindex", path=".")
    assert {"path": "swap.md", "reason": SYMLINK_OUTSIDE} in result["skipped"]
    assert "is not an indexed file" in await refused(session, "get_file", path="swap.md")


@pytest.fixture
def scratch(hostile_tree: IndexedTree, tmp_path: Path) -> Path:
    """A fresh directory inside the server's allowed root (a db_path must lie there)."""
    directory = hostile_tree.root / "scratch" / tmp_path.name
    directory.mkdir(parents=True)
    return directory


def foreign_files(directory: Path) -> dict[str, Path]:
    """An empty file, a text file, and another application's SQLite database in WAL mode."""
    directory.mkdir(exist_ok=True)
    empty = directory / "empty.db"
    empty.write_bytes(b"")
    text = directory / "passwd"
    text.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/bin/sh\n")
    other = directory / "other-app.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes(body) VALUES ('not yours')")
    conn.commit()
    conn.close()
    wal = directory / "other-wal.sqlite"
    conn = sqlite3.connect(wal)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x)")
    conn.commit()
    conn.close()
    return {"empty": empty, "text": text, "other": other, "wal": wal}


async def test_db_path_never_writes_a_file_that_is_not_an_index(
    session: ClientSession, scratch: Path
) -> None:
    files = foreign_files(scratch / "foreign")
    before = {name: sha256(path) for name, path in files.items()}
    sizes = {name: path.stat().st_size for name, path in files.items()}
    for name, path in files.items():
        message = await refused(session, "search_rifflux", query="x", db_path=str(path))
        assert "is not a Rifflux index" in message and "damaged" not in message, (name, message)
    assert {name: sha256(path) for name, path in files.items()} == before
    assert {name: path.stat().st_size for name, path in files.items()} == sizes
    conn = sqlite3.connect(files["other"])
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    conn.close()
    assert tables == ["notes"]
    missing = scratch / "nowhere" / "index.db"
    message = await refused(session, "search_rifflux", query="x", db_path=str(missing))
    assert message.startswith(f"no index at {missing}")
    assert not missing.parent.exists()
    assert "is a directory" in await refused(
        session, "search_rifflux", query="x", db_path=str(scratch)
    )


async def test_db_path_searches_another_index_without_writing_it(
    session: ClientSession, scratch: Path
) -> None:
    other = build_tree(scratch / "other")
    shutil.rmtree(f"{other.db_path}.vectors")
    digest = sha256(other.db_path)
    result = await ok(session, "search_rifflux", query="basil tomatoes", db_path=str(other.db_path))
    assert result["count"] > 0
    assert sha256(other.db_path) == digest
    assert not Path(f"{other.db_path}.vectors").exists()


async def test_a_damaged_database_is_one_line_naming_the_rebuild(
    session: ClientSession, scratch: Path
) -> None:
    other = build_tree(scratch / "damaged")
    data = bytearray(other.db_path.read_bytes())
    page = 4096
    for offset in range(page, len(data), page):
        data[offset : offset + page] = os.urandom(page)
    other.db_path.write_bytes(bytes(data))
    message = await refused(session, "search_rifflux", query="basil", db_path=str(other.db_path))
    assert message.startswith("index database is damaged (")
    assert message.endswith("rebuild with `rifflux index --rebuild DIR`")
    assert "internal error" not in message
    assert (await ok(session, "index_status"))["files"] >= 3


async def test_client_roots_narrow_the_allowed_roots(hostile_tree: IndexedTree) -> None:
    root = hostile_tree.root
    secret = root.parent / "secret"
    env = {"RIFFLUX_ALLOWED_ROOTS": f"{root},{secret}"}
    declared = [root / "docs", secret, Path("/etc")]
    async with stdio_session(hostile_tree, client_roots=declared, **env) as s:
        assert "outside the allowed roots" in await refused(s, "reindex", path="/etc")
        assert "outside the allowed roots" in await refused(s, "reindex", path="notes")
        assert "outside the allowed roots" in await refused(
            s, "get_file", path="notes/gardening.txt"
        )
        assert (await ok(s, "get_file", path="docs/install.md"))["file"]["chunks"]
        message = await refused(s, "reindex", path=str(secret / "photo.jpg"))
        assert "is not indexed: its name does not match RIFFLUX_INDEX_INCLUDE_GLOBS" in message
        message = await refused(s, "reindex", path=str(secret / "id_rsa"))
        assert message.endswith("is not indexed: " + secret_reason("id_*"))
        result = await ok(s, "reindex", path="docs")
        assert result["indexed_paths"] == [str(root / "docs")]


async def test_client_roots_replace_the_default_when_no_roots_are_configured(
    hostile_tree: IndexedTree,
) -> None:
    root = hostile_tree.root
    async with stdio_session(hostile_tree, client_roots=[root / "docs"]) as s:
        assert "outside the allowed roots" in await refused(s, "reindex", path="notes")
        assert "outside the allowed roots" in await refused(s, "reindex", path="../secret")
        assert (await ok(s, "get_file", path="docs/search.md"))["file"]["chunks"]


async def test_db_path_can_be_disabled_and_a_dead_broker_is_one_line(
    hostile_tree: IndexedTree,
) -> None:
    env = {"RIFFLUX_ALLOW_DB_PATH": "0", "RIFFLUX_BROKER_URL": "redis://127.0.0.1:1/0"}
    async with stdio_session(hostile_tree, **env) as s:
        message = await refused(s, "reindex", path="docs")
        assert message.startswith("cannot use the broker at redis://127.0.0.1:1/0 (")
        message = await refused(
            s, "search_rifflux", query="basil", db_path=str(hostile_tree.db_path)
        )
        assert "db_path is disabled on this server (RIFFLUX_ALLOW_DB_PATH=0)" in message
        assert (await ok(s, "search_rifflux", query="basil"))["count"] > 0


async def test_without_an_index_reads_report_it_and_create_nothing(tmp_path: Path) -> None:
    tree = IndexedTree(root=tmp_path / "empty", db_path=tmp_path / "empty" / "state" / "index.db")
    tree.root.mkdir()
    (tree.root / "first.md").write_text("# First\n\nA note about lighthouses.\n")
    async with stdio_session(tree) as s:
        for tool, arguments in (
            ("search_rifflux", {"query": "lighthouses"}),
            ("index_status", {}),
            ("get_file", {"path": "first.md"}),
        ):
            message = await refused(s, tool, **arguments)
            assert message == (f"no index at {tree.db_path}; create it with `rifflux index DIR`"), (
                tool,
                message,
            )
        assert not tree.db_path.parent.exists()
        assert (await ok(s, "reindex"))["indexed_files"] == 1
        hits = (await ok(s, "search_rifflux", query="lighthouses", mode="lexical"))["results"]
        assert [hit["path"] for hit in hits] == ["first.md"]


async def test_over_http_reindex_and_get_file_outside_the_roots_are_refused(
    hostile_tree: IndexedTree,
) -> None:
    from http_support import http_session, start_http_server

    secret = hostile_tree.root.parent / "secret"
    servers = start_http_server(hostile_tree)
    server = next(servers)
    try:
        async with http_session(server.url) as s:
            message = await refused(s, "reindex", path=str(secret / "id_rsa"))
            assert "is outside the allowed roots" in message
            assert "is outside the allowed roots" in await refused(s, "reindex", path="/")
            message = await refused(s, "get_file", path="notes/leak.md")
            assert "is not an indexed file" in message
            assert (await ok(s, "get_file", path="docs/install.md"))["file"]["chunks"]
    finally:
        servers.close()
