"""Incremental indexing on real files and a real SQLite index."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from rifflux_testing import index_rows, make_settings

from rifflux.embed.hashing import HashEmbedder
from rifflux.errors import EmbeddingModelMismatch, RootNotFoundError
from rifflux.index.chunker import chunk_id_for
from rifflux.index.indexer import Indexer
from rifflux.store.connection import open_index
from rifflux.store.reader import IndexReader


class CountingEmbedder(HashEmbedder):
    """The hash embedder, remembering every text it was asked to embed."""

    def __init__(self) -> None:
        super().__init__(384)
        self.texts: list[str] = []

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return super().embed_batch(texts)


def long_doc(sections: int, changed: int | None = None) -> str:
    parts = ["# Handbook\n"]
    for i in range(sections):
        body = f"Section {i} explains topic {i} in detail with enough words to stand alone. " * 3
        if i == changed:
            body = "This section was rewritten with entirely new guidance about backups. " * 3
        parts.append(f"## Topic {i}\n\n{body}\n")
    return "\n".join(parts)


def test_editing_one_section_embeds_only_that_section(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    doc = root / "handbook.md"
    doc.write_text(long_doc(50))
    embedder = CountingEmbedder()
    indexer = Indexer(make_settings(tmp_path, min_chunk_chars=0), embedder=embedder)
    first = indexer.run([root])
    assert first.chunks_written >= 50 and len(embedder.texts) == first.chunks_written

    embedder.texts.clear()
    doc.write_text(long_doc(50, changed=17))
    second = indexer.run([root])
    assert second.files_indexed == 1
    assert len(embedder.texts) == 1 and "rewritten" in embedder.texts[0]
    assert second.vectors_new == 1 and second.vectors_reused == second.chunks_written - 1
    assert all(vec is not None for *_, vec in index_rows(indexer.settings.db_path))


def test_inserting_a_section_reuses_vectors_of_shifted_chunks(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    doc = root / "a.md"
    doc.write_text(long_doc(5))
    embedder = CountingEmbedder()
    indexer = Indexer(make_settings(tmp_path, min_chunk_chars=0), embedder=embedder)
    indexer.run([root])
    embedder.texts.clear()
    doc.write_text(
        "# Preface\n\nA brand new opening section about sailing boats.\n\n" + long_doc(5)
    )
    report = indexer.run([root])
    assert len(embedder.texts) == 1 and "sailing" in embedder.texts[0]
    assert report.vectors_reused == report.chunks_written - 1


def test_unchanged_run_reads_nothing_and_touch_updates_metadata_only(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha text\n")
    embedder = CountingEmbedder()
    indexer = Indexer(make_settings(tmp_path), embedder=embedder)
    indexer.run([root])
    before = index_rows(indexer.settings.db_path)
    again = indexer.run([root])
    assert (again.files_unchanged, again.files_indexed) == (1, 0)
    os.utime(root / "a.md", ns=(1, 1))
    touched = indexer.run([root])
    assert (touched.files_metadata_only, touched.files_indexed) == (1, 0)
    assert index_rows(indexer.settings.db_path) == before
    forced = indexer.run([root], force=True)
    assert forced.files_indexed == 1


def test_vanished_files_are_pruned_only_under_scanned_roots(tmp_path: Path) -> None:
    docs, notes = tmp_path / "docs", tmp_path / "notes"
    docs.mkdir()
    notes.mkdir()
    (docs / "a.md").write_text("# A\n\nalpha\n")
    (docs / "b.md").write_text("# B\n\nbravo\n")
    (notes / "n.md").write_text("# N\n\nnovember\n")
    indexer = Indexer(make_settings(tmp_path))
    indexer.run([docs, notes])
    (docs / "b.md").unlink()
    (notes / "n.md").unlink()
    report = indexer.run([docs])
    assert report.files_deleted == 1
    paths = {r[0] for r in index_rows(indexer.settings.db_path)}
    assert paths == {"docs/a.md", "notes/n.md"}
    kept = indexer.run([docs, notes], prune_missing=False)
    assert kept.files_deleted == 0
    assert indexer.run([notes]).files_deleted == 1


def test_bad_input_is_counted_and_never_stops_the_run(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nfine text\n")
    (root / "latin1.md").write_bytes("# Caf\xe9\n\nna\xefve text\n".encode("latin-1"))
    (root / "binary.md").write_bytes(b"\x89PNG\x00\x00binary")
    (root / "huge.md").write_text("x" * 2_000)
    os.symlink(root / "missing-target.md", root / "dangling.md")
    report = Indexer(make_settings(tmp_path, max_file_bytes=1_000)).run([root])
    reasons = {s.rel_path: s.reason for s in report.skipped}
    assert "binary" in reasons["docs/binary.md"]
    assert "larger than" in reasons["docs/huge.md"]
    assert "unreadable" in reasons["docs/dangling.md"]
    assert report.files_indexed == 2
    contents = {r[0]: r[5] for r in index_rows(make_settings(tmp_path).db_path)}
    assert "\ufffd" in contents["docs/latin1.md"]


def test_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RootNotFoundError, match="nope"):
        Indexer(make_settings(tmp_path)).run([tmp_path / "nope"])


def test_short_files_and_text_files_are_searchable(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "tiny.md").write_text("# Tiny\n\none\ntwo\nthree\n")
    (root / "notes.txt").write_text("first paragraph\n\nsecond paragraph\n")
    Indexer(make_settings(tmp_path)).run([root])
    found = index_rows(make_settings(tmp_path).db_path)
    assert {r[0] for r in found} == {"docs/tiny.md", "docs/notes.txt"}


def test_chunk_ids_are_stable_across_runs_and_databases(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text(long_doc(3))
    one = make_settings(tmp_path, db_path=tmp_path / "one.db", min_chunk_chars=0)
    two = make_settings(tmp_path, db_path=tmp_path / "two.db", min_chunk_chars=0)
    Indexer(one).run([root])
    Indexer(two).run([root / "a.md"])
    ids_one = [r[2] for r in index_rows(one.db_path)]
    assert ids_one == [r[2] for r in index_rows(two.db_path)]
    assert ids_one[0] == chunk_id_for("docs/a.md", 0)


def test_switching_embedder_requires_force(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha\n")
    Indexer(make_settings(tmp_path)).run([root])
    other = Indexer(make_settings(tmp_path, hash_embedding_dim=64))
    with pytest.raises(EmbeddingModelMismatch, match="--force"):
        other.run([root])
    assert other.run([root], force=True).vectors_new == 1


def test_base_dir_is_recorded_on_first_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha\n")
    monkeypatch.chdir(tmp_path)
    settings = make_settings(tmp_path, base_dir=None)
    Indexer(settings).run([Path("docs")])
    monkeypatch.chdir(root)
    report = Indexer(settings).run([Path(".")])
    assert report.files_unchanged == 1
    conn = sqlite3.connect(settings.db_path)
    assert conn.execute("SELECT path FROM files").fetchall() == [("docs/a.md",)]


def test_an_in_process_index_records_its_roots_as_a_queued_job_does(tmp_path: Path) -> None:
    """index_status counts per indexed root: an in-process index names its roots too, so
    a later queued job over the same roots changes nothing a reader sees."""
    docs, notes = tmp_path / "docs", tmp_path / "notes"
    for folder, name in ((docs, "a.md"), (notes, "n.md")):
        folder.mkdir()
        (folder / name).write_text(f"# {name}\n\ntext\n")
    indexer = Indexer(make_settings(tmp_path))
    indexer.run([docs])
    indexer.run([docs, notes])
    conn = open_index(indexer.settings.db_path)
    try:
        counts = IndexReader(conn).counts_by_root()
    finally:
        conn.close()
    assert [(c["root"], c["files"], c["chunks"]) for c in counts] == [
        ("docs", 1, 1),
        ("notes", 1, 1),
    ]
