"""Issue 20, findings 2 and 3, reproduced over real stdio sessions as found.

2. A server started in ``$HOME`` (as desktop hosts start it) allowed everything under
   home; a cloned repository's ``docs/install.md -> ../../../.ssh/id_rsa`` then put the
   private key in the index and ``get_file`` served it. Now: no default root there, and
   with ``RIFFLUX_ALLOWED_ROOTS=$HOME`` the key is skipped with a reason.
3. ``db_path`` read any index on the disk; now it is confined to the allowed roots by
   realpath.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp_support import (  # noqa: F401  (fixtures)
    IndexedTree,
    anyio_backend_fixture,
    call_error,
    call_ok,
    stdio_session,
    write_docs,
)

from rifflux.errors import SecretPathError
from rifflux.index.denied import secret_reason
from rifflux.index.indexer import Indexer
from rifflux.index.scan import SYMLINK_OUTSIDE
from rifflux.mcp import tools
from rifflux.mcp.tools import ToolContext

CALL_TIMEOUT_S = 90
KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ zebracorn quokkafish\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
KEY_WORDS = ("zebracorn quokkafish", "OPENSSH PRIVATE KEY")
NOTES = {"notes/plants.md": "# Plants\n\nBasil grows well next to tomatoes in full sun.\n"}
REPO = {"docs/guide.md": "# Guide\n\nClone the repository and run make to build it.\n"}


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    return await call_error(session, tool, timeout=CALL_TIMEOUT_S, **arguments)


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    return await call_ok(session, tool, timeout=CALL_TIMEOUT_S, **arguments)


def no_roots(cwd: Path, why: str) -> str:
    return (
        f"no allowed roots: the server runs in {cwd} ({why}), so nothing is shared by "
        "default; set RIFFLUX_ALLOWED_ROOTS=/path/to/notes"
    )


def index_into(tree: IndexedTree, *roots: Path, **overrides: object) -> None:
    Indexer(tree.settings().with_overrides(**overrides)).run(list(roots))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    """A fake ``$HOME`` holding ``.ssh/id_rsa``, notes (indexed) and a cloned repository
    whose ``docs/install.md`` links to the key, as in finding 2."""
    home = tmp_path_factory.mktemp("finding2") / "home" / "me"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(KEY)
    write_docs(home, NOTES)
    repo = home / "src" / "repo"
    write_docs(repo, REPO)
    os.symlink("../../../.ssh/id_rsa", repo / "docs" / "install.md")
    assert (repo / "docs" / "install.md").read_text() == KEY
    tree = IndexedTree(root=home, db_path=home / ".rifflux" / "index.db")
    index_into(tree, home / "notes")
    return tree


def warnings_in(errlog: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in errlog.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "mcp.no_allowed_roots"]


@pytest.mark.anyio
async def test_a_server_in_a_home_directory_has_no_default_root(
    home: IndexedTree, tmp_path: Path
) -> None:
    root = home.root
    refusal = no_roots(root.resolve(), "a home directory")
    errlog = tmp_path / "server.err"
    with sqlite3.connect(home.db_path) as conn:
        (chunk_id,) = conn.execute("SELECT chunk_id FROM chunks").fetchone()
    with errlog.open("w") as err:
        async with stdio_session(home, errlog=err, HOME=str(root)) as s:
            hit = (await ok(s, "search_rifflux", query="basil tomatoes", mode="lexical"))[
                "results"
            ][0]
            assert hit["path"] == "notes/plants.md"
            assert (await ok(s, "index_status"))["files"] == 1
            assert (await ok(s, "context_stats"))["files"] == 1
            for tool, arguments in (
                ("reindex", {"path": "src/repo"}),
                ("reindex", {}),
                ("reindex", {"path": str(root / ".ssh")}),
                ("get_file", {"path": "notes/plants.md"}),
                ("get_chunk", {"chunk_id": chunk_id}),
                ("multi_get", {"paths": ["**"]}),
                ("search_rifflux", {"query": "x", "db_path": str(root / "other.db")}),
            ):
                assert await refused(s, tool, **arguments) == refusal, tool
    assert [w["reason"] for w in warnings_in(errlog)] == [refusal]
    assert not (root / ".rifflux" / "queue.db").exists()  # Nothing was ever submitted.


@pytest.mark.anyio
async def test_the_roots_a_host_declares_still_replace_the_missing_default(
    home: IndexedTree,
) -> None:
    """Client roots come from the host, not from the model: they keep their meaning."""
    root = home.root
    async with stdio_session(home, client_roots=[root / "notes"], HOME=str(root)) as s:
        assert (await ok(s, "get_file", path="notes/plants.md"))["file"]["chunks"]
        found = await ok(s, "search_rifflux", query="basil tomatoes", mode="lexical")
        assert [hit["path"] for hit in found["results"]] == ["notes/plants.md"]
        message = await refused(s, "reindex", path="src/repo")
        assert "is outside the allowed roots" in message


@pytest.mark.anyio
async def test_a_server_in_the_filesystem_root_refuses_reindex_of_etc(home: IndexedTree) -> None:
    at_root = IndexedTree(root=Path("/"), db_path=home.db_path)
    async with stdio_session(at_root, HOME=str(home.root)) as s:
        for path in ("/etc", "/etc/hostname", "etc"):
            message = await refused(s, "reindex", path=path)
            assert message == no_roots(Path("/"), "the filesystem root"), path
        assert (await ok(s, "search_rifflux", query="basil", mode="lexical"))["count"] == 1


@pytest.mark.anyio
async def test_with_home_as_the_allowed_root_the_linked_key_is_skipped_and_never_served(
    home: IndexedTree,
) -> None:
    root = home.root
    env = {"HOME": str(root), "RIFFLUX_ALLOWED_ROOTS": str(root)}
    async with stdio_session(home, **env) as s:
        # The repository alone: the link leads out of the job's roots.
        result = await ok(s, "reindex", path="~/src/repo")
        assert result["indexed_files"] == 1
        assert result["skipped"] == [
            {"path": "src/repo/docs/install.md", "reason": SYMLINK_OUTSIDE}
        ]
        # The whole home: the link's target is inside, but a secret; so is ~/.ssh.
        result = await ok(s, "reindex", path=".")
        skipped = {entry["path"]: entry["reason"] for entry in result["skipped"]}
        assert skipped == {
            ".ssh": secret_reason(".ssh"),
            "src/repo/docs/install.md": secret_reason(".ssh"),
        }
        for path in ("~/.ssh", ".ssh/id_rsa", str(root / ".ssh" / "id_rsa")):
            message = await refused(s, "reindex", path=path)
            assert message.endswith(f"is not indexed: {secret_reason('.ssh')}"), message
        status = await ok(s, "index_status")
        assert status["files"] == 2
        for words in KEY_WORDS:
            for mode in ("lexical", "hybrid"):
                found = await ok(s, "search_rifflux", query=words, mode=mode)
                assert all("PRIVATE KEY" not in hit["content"] for hit in found["results"])
        for path in ("src/repo/docs/install.md", ".ssh/id_rsa"):
            assert "is not an indexed file" in await refused(s, "get_file", path=path)
        guide = await ok(s, "get_file", path="src/repo/docs/guide.md")
        assert "make" in guide["file"]["chunks"][0]["content"]


@pytest.fixture(scope="module")
def finding3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[IndexedTree, Path]]:
    """``notes/`` (the allowed root, with its own index and an archive index inside it)
    and ``private/`` beside it, whose index holds the bank PIN."""
    base = tmp_path_factory.mktemp("finding3")
    notes = IndexedTree(root=base / "notes", db_path=base / "notes" / ".rifflux" / "index.db")
    write_docs(notes.root, NOTES)
    index_into(notes, notes.root / "notes")
    archive = base / "notes" / "archive"
    write_docs(archive, {"old.md": "# Old\n\nThe lighthouse keeper kept a logbook.\n"})
    index_into(IndexedTree(archive, archive / ".rifflux" / "index.db"), archive)
    private = IndexedTree(root=base / "private", db_path=base / "private" / ".rifflux" / "index.db")
    write_docs(private.root, {"bank.md": "# Bank\n\nThe bank PIN is 4912.\n"})
    index_into(private, private.root)
    os.symlink(private.db_path, notes.root / "linked.db")
    os.symlink(private.root, notes.root / "private-dir")
    yield notes, private.db_path


@pytest.mark.anyio
async def test_db_path_is_confined_to_the_allowed_roots_by_realpath(
    finding3: tuple[IndexedTree, Path],
) -> None:
    notes, private_db = finding3
    root, private_db = notes.root.resolve(), private_db.resolve()
    async with stdio_session(notes, RIFFLUX_ALLOWED_ROOTS=str(root)) as s:
        message = await refused(s, "search_rifflux", query="bank PIN", db_path=str(private_db))
        assert message == (
            f"db_path {private_db} is outside the allowed roots ({root}); "
            f"pass a path inside them (relative paths are read from {root})"
        )
        for db_path in (
            "../private/.rifflux/index.db",
            "linked.db",
            "private-dir/.rifflux/index.db",
        ):
            message = await refused(s, "search_rifflux", query="bank PIN", db_path=db_path)
            assert message == (
                f"db_path {db_path!r} (resolves to {private_db}) is outside the allowed roots "
                f"({root}); paths are relative to {root}"
            ), db_path
        inside = str(root / "archive" / ".rifflux" / "index.db")
        found = await ok(s, "search_rifflux", query="lighthouse logbook", db_path=inside)
        assert [hit["path"] for hit in found["results"]] == ["old.md"]
        own = await ok(s, "search_rifflux", query="basil", db_path=".rifflux/index.db")
        assert own["count"] == 1


def test_a_secret_in_an_older_index_is_not_served(tmp_path: Path) -> None:
    """An index built with RIFFLUX_ALLOW_SECRET_PATHS=1 (or before the deny list) holds a
    secret: a server without the override serves it through neither get_file nor
    get_chunk."""
    tree = IndexedTree(root=tmp_path, db_path=tmp_path / ".rifflux" / "index.db")
    write_docs(tmp_path, {"notes/.env.md": "# Env\n\nAPI_TOKEN=hunter2\n"})
    index_into(tree, tmp_path / "notes", allow_secret_paths=True)
    for allow in (False, True):
        settings = tree.settings().with_overrides(allow_secret_paths=allow)
        ctx = ToolContext.from_settings(settings, cwd=tmp_path)
        try:
            chunk_id = ctx.search.get_file("notes/.env.md")["chunks"][0]["chunk_id"]
            if allow:
                assert tools.get_file(ctx, "notes/.env.md")["file"]["chunks"]
                assert tools.get_chunk(ctx, chunk_id)["chunk"]["chunk_id"] == chunk_id
                continue
            expected = f"'notes/.env.md' is not served: {secret_reason('.env*', 'serve')}"
            with pytest.raises(SecretPathError) as refused_file:
                tools.get_file(ctx, "notes/.env.md")
            assert str(refused_file.value) == expected
            with pytest.raises(SecretPathError, match="is not served: secret path"):
                tools.get_chunk(ctx, chunk_id)
        finally:
            ctx.close()
