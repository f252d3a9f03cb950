import json
import sqlite3
import threading
from pathlib import Path

import pytest

from rifflux.errors import SchemaVersionError
from rifflux.store.connection import open_index, write_transaction
from rifflux.store.jobs import get_job
from rifflux.store.schema import SCHEMA_VERSION


def fts_rows(conn: sqlite3.Connection, term: str) -> list[int]:
    return [
        r[0] for r in conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?", (term,))
    ]


def add_file(conn: sqlite3.Connection, path: str, text: str) -> int:
    with write_transaction(conn):
        file_id = conn.execute(
            "INSERT INTO files(path, mtime_ns, size_bytes, sha256, indexed_at)"
            " VALUES (?, 1, 1, 'x', 0)",
            (path,),
        ).lastrowid
        conn.execute(
            "INSERT INTO chunks(chunk_id, file_id, chunk_index, heading_path, content,"
            " embed_sha256) VALUES (?, ?, 0, 'Guide', ?, 'h')",
            (f"id-{path}", file_id, text),
        )
    return int(file_id)


def test_new_database_is_wal_and_versioned(tmp_path: Path) -> None:
    conn = open_index(tmp_path / "index.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    version = conn.execute("SELECT value FROM index_metadata WHERE key='schema_version'").fetchone()
    assert int(version[0]) == SCHEMA_VERSION


def test_fts_follows_insert_update_delete_and_cascade(tmp_path: Path) -> None:
    conn = open_index(tmp_path / "index.db")
    file_id = add_file(conn, "a.md", "alpha bravo")
    assert len(fts_rows(conn, "alpha")) == 1
    conn.execute("UPDATE chunks SET content = 'charlie' WHERE file_id = ?", (file_id,))
    assert fts_rows(conn, "alpha") == [] and len(fts_rows(conn, "charlie")) == 1
    conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
    assert fts_rows(conn, "charlie") == []
    assert conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 0
    # The FTS index itself is consistent with its content table.
    conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")


def path_rows(conn: sqlite3.Connection, term: str) -> list[int]:
    """The ``files_fts`` rowids indexed under ``term`` (a stale row would still be listed:
    an external-content table's MATCH reads only its own index)."""
    sql = "SELECT rowid FROM files_fts WHERE files_fts MATCH ?"
    return [r[0] for r in conn.execute(sql, (term,))]


def test_the_path_fts_follows_insert_rename_and_delete(tmp_path: Path) -> None:
    conn = open_index(tmp_path / "index.db")
    file_id = add_file(conn, "docs/kubernetes-guide.md", "alpha")
    other = add_file(conn, "docs/notes.md", "alpha")
    assert path_rows(conn, "kubernetes") == [file_id]
    assert path_rows(conn, "docs") == [file_id, other]
    conn.execute("UPDATE files SET path = 'docs/terraform.md' WHERE id = ?", (file_id,))
    assert path_rows(conn, "kubernetes") == [] and path_rows(conn, "terraform") == [file_id]
    # The writer's upsert of an unchanged path touches no path row.
    conn.execute("UPDATE files SET mtime_ns = 2 WHERE id = ?", (file_id,))
    assert path_rows(conn, "terraform") == [file_id]
    conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
    assert path_rows(conn, "terraform") == [] and path_rows(conn, "docs") == [other]
    conn.execute("INSERT INTO files_fts(files_fts) VALUES ('integrity-check')")


def test_porter_stemming_matches_inflections(tmp_path: Path) -> None:
    conn = open_index(tmp_path / "index.db")
    add_file(conn, "a.md", "Running the indexers")
    assert len(fts_rows(conn, "run")) == 1 and len(fts_rows(conn, "indexer")) == 1


def test_other_schema_version_names_the_rebuild_command(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    open_index(db).execute("UPDATE index_metadata SET value='999' WHERE key='schema_version'")
    with pytest.raises(SchemaVersionError, match=r"rifflux index --rebuild"):
        open_index(db)


def test_unversioned_old_index_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE files(id INTEGER PRIMARY KEY, path TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaVersionError, match="no schema version"):
        open_index(db)


def test_an_index_without_the_job_plan_columns_gets_them_filled_from_options(
    tmp_path: Path,
) -> None:
    db = tmp_path / "index.db"
    conn = open_index(db)
    options = {"force": False, "planned": True, "skipped": [{"path": "a", "reason": "binary"}]}
    options["prune_paths"] = ["docs/gone.md"]
    with write_transaction(conn):
        for job_id, opts in (("old", options), ("queued", {"force": False})):
            conn.execute(
                "INSERT INTO jobs(id, roots, options, state, created_at, updated_at) "
                "VALUES (?, '[]', ?, 'running', 0, 0)",
                (job_id, json.dumps(opts)),
            )
    # The jobs table as the previous Rifflux created it.
    for column in ("planned", "skipped", "prune_paths"):
        conn.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
    conn.close()

    for _ in range(2):  # idempotent: the second open changes nothing
        conn = open_index(db)
        old, queued = get_job(conn, "old"), get_job(conn, "queued")
        conn.close()
        assert old is not None and queued is not None
        assert old.planned and old.prune_paths == ["docs/gone.md"]
        assert old.skipped == [{"path": "a", "reason": "binary"}]
        assert (queued.planned, queued.skipped, queued.prune_paths) == (False, [], [])


def test_openers_racing_to_create_a_new_index_all_get_it(tmp_path: Path) -> None:
    # The watcher, the submitting client and a worker may all open a new index at once;
    # none of them may mistake the half-created file for an old or a foreign database.
    # (Before the fix, about 1 attempt in 9 failed this way.)
    for attempt in range(50):
        db = tmp_path / f"race-{attempt}" / "index.db"
        barrier = threading.Barrier(8)
        errors: list[BaseException] = []

        def open_once(
            db: Path = db,
            barrier: threading.Barrier = barrier,
            errors: list[BaseException] = errors,
        ) -> None:
            barrier.wait()
            try:
                open_index(db).close()
            except Exception as exc:
                errors.append(exc)

        openers = [threading.Thread(target=open_once) for _ in range(8)]
        for thread in openers:
            thread.start()
        for thread in openers:
            thread.join()
        assert errors == [], errors[0]
