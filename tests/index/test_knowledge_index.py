"""Knowledge rows in the index: written with the chunks, filled into older indexes once,
pruned with their files, and malformed front matter reported by the job, never failed."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from knowledge_corpus import CORPUS, detect
from rifflux_testing import make_settings

from rifflux.embed.hashing import HashEmbedder
from rifflux.index import kinds, pipeline, prepare
from rifflux.index.chunker import normalize_text
from rifflux.index.frontmatter import FrontMatter
from rifflux.index.indexer import Indexer
from rifflux.index.jobspec import JobSpec
from rifflux.index.messages import finalize_request, plan_request
from rifflux.store import jobs
from rifflux.store.connection import open_index

KNOWLEDGE_OBJECTS = ("file_knowledge", "file_tags", "error_pairs", "chunks_about")


def copy_knowledge_corpus(dest: Path) -> Path:
    shutil.copytree(CORPUS, dest, ignore=shutil.ignore_patterns("expected.json"))
    return dest


def rows(db: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


@pytest.fixture(name="indexed")
def indexed_fixture(tmp_path: Path):
    root = copy_knowledge_corpus(tmp_path / "kb")
    settings = make_settings(tmp_path)
    report = Indexer(settings).run([root])
    return settings, root, report


def test_each_file_s_kind_tags_and_error_pairs_are_stored(indexed) -> None:
    settings, root, report = indexed
    db = settings.db_path
    stored = dict(
        rows(db, "SELECT f.path, k.kind FROM files f JOIN file_knowledge k ON k.file_id = f.id")
    )
    paths = sorted(
        p.relative_to(tmp).as_posix()
        for tmp in [root.parent]
        for p in root.rglob("*")
        if p.is_file()
    )
    assert sorted(stored) == paths
    for path, kind in stored.items():
        assert kind == detect(root.parent, path).kind, path
    assert rows(db, "SELECT COUNT(*) FROM error_pairs") == [(19,)]
    assert ("database", 3) in rows(db, "SELECT tag, COUNT(*) FROM file_tags GROUP BY tag")
    about = dict(
        rows(
            db, "SELECT c.chunk_index, a.about FROM chunks_about a JOIN chunks c ON c.id = a.rowid"
        )
    )
    assert set(about) == {0}
    assert report.files_indexed == len(paths)


def test_an_unchanged_index_rechunks_nothing(indexed) -> None:
    settings, root, _ = indexed
    again = Indexer(settings).run([root])
    assert (again.files_indexed, again.files_unchanged) == (0, again.files_scanned)


def test_an_index_written_before_the_knowledge_tables_is_filled_by_one_rechunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_knowledge_corpus(tmp_path / "kb")
    settings = make_settings(tmp_path)
    # The old indexer: front matter kept as text, no knowledge rows.
    with monkeypatch.context() as old:
        old.setattr(
            prepare, "split_front_matter", lambda text, _path: FrontMatter(normalize_text(text))
        )
        first = Indexer(settings).run([root])
    conn = sqlite3.connect(settings.db_path)
    for name in KNOWLEDGE_OBJECTS:
        conn.execute(f"DROP TABLE {name}")
    conn.commit()
    conn.close()
    kept_as_text = rows(settings.db_path, "SELECT COUNT(*) FROM chunks WHERE content LIKE '---%'")
    assert kept_as_text[0][0] > 5

    upgraded = Indexer(settings).run([root])
    assert upgraded.files_indexed == first.files_indexed  # every file, once
    # Only the chunks whose text lost its front matter are embedded again.
    assert 0 < upgraded.vectors_new < upgraded.chunks_written
    assert upgraded.vectors_reused > 0
    assert (
        rows(settings.db_path, "SELECT COUNT(*) FROM file_knowledge")[0][0] == first.files_indexed
    )
    assert rows(settings.db_path, "SELECT COUNT(*) FROM chunks WHERE content LIKE '---%'") == [(1,)]
    assert Indexer(settings).run([root]).files_indexed == 0


def test_new_rules_rechunk_files_stored_under_the_old_ones(
    indexed, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, root, report = indexed
    monkeypatch.setattr(kinds, "KNOWLEDGE_VERSION", kinds.KNOWLEDGE_VERSION + 1)
    monkeypatch.setattr(pipeline, "KNOWLEDGE_VERSION", kinds.KNOWLEDGE_VERSION)
    assert Indexer(settings).run([root]).files_indexed == report.files_indexed
    assert Indexer(settings).run([root]).files_indexed == 0


def test_a_pruned_file_takes_its_knowledge_rows_with_it(indexed) -> None:
    settings, root, _ = indexed
    (root / "docs" / "troubleshooting" / "git.md").unlink()
    (root / "docs" / "adr" / "0005-use-postgresql-as-the-primary-database.md").unlink()
    assert Indexer(settings).run([root]).files_deleted == 2
    db = settings.db_path
    assert rows(db, "SELECT COUNT(*) FROM error_pairs") == [(17,)]
    orphans = rows(
        db,
        "SELECT (SELECT COUNT(*) FROM file_knowledge WHERE file_id NOT IN (SELECT id FROM files)),"
        " (SELECT COUNT(*) FROM file_tags WHERE file_id NOT IN (SELECT id FROM files)),"
        " (SELECT COUNT(*) FROM chunks_about WHERE rowid NOT IN (SELECT id FROM chunks))",
    )
    assert orphans == [(0, 0, 0)]


def test_an_edited_file_replaces_its_rows(indexed) -> None:
    settings, root, _ = indexed
    adr = root / "docs" / "decisions" / "use-redis-for-session-storage.md"
    adr.write_text(adr.read_text().replace("status: accepted", "status: deprecated"))
    Indexer(settings).run([root])
    found = rows(
        settings.db_path,
        "SELECT k.status, (SELECT COUNT(*) FROM file_tags t WHERE t.file_id = f.id), "
        "(SELECT COUNT(*) FROM chunks_about a JOIN chunks c ON c.id = a.rowid "
        "WHERE c.file_id = f.id) FROM files f JOIN file_knowledge k ON k.file_id = f.id "
        "WHERE f.path LIKE '%use-redis%'",
    )
    assert found == [("deprecated", 2, 1)]


def test_malformed_front_matter_is_a_skipped_reason_of_the_job_not_a_failure(
    tmp_path: Path,
) -> None:
    root = copy_knowledge_corpus(tmp_path / "kb")
    settings = make_settings(tmp_path)
    conn = open_index(settings.db_path)
    try:
        options = JobSpec.from_settings(settings, force=False, prune_missing=True).to_dict()
        job_id = jobs.create_job(conn, [str(root)], options)
    finally:
        conn.close()
    chunk_requests, embed_requests = [], []
    pipeline.plan(
        settings,
        plan_request(str(settings.db_path), job_id),
        chunk_requests.append,
        embed_requests.append,
    )
    for request in chunk_requests:
        for embed in pipeline.chunk(request).embeds:
            pipeline.write_vectors(pipeline.embed(embed, HashEmbedder()))
    record = pipeline.finalize(finalize_request(str(settings.db_path), job_id))
    assert record is not None and record.state == "completed"
    assert record.files_failed == 0
    assert record.skipped == [
        {
            "path": "kb/notes/broken-front-matter.md",
            "reason": "front matter is not valid YAML: did not find expected ',' or ']' "
            "(line 3); indexed as text",
        }
    ]
    text_chunk = rows(
        settings.db_path,
        "SELECT c.content FROM chunks c JOIN files f ON f.id = c.file_id "
        "WHERE f.path = 'kb/notes/broken-front-matter.md'",
    )
    assert text_chunk[0][0].startswith("---\ntitle: [unclosed")


def test_the_in_process_indexer_reports_it_too(indexed) -> None:
    _, _, report = indexed
    reasons = {s.rel_path: s.reason for s in report.skipped}
    assert reasons == {
        "kb/notes/broken-front-matter.md": "front matter is not valid YAML: did not find "
        "expected ',' or ']' (line 3); indexed as text"
    }
