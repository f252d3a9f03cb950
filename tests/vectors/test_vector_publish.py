"""Publishing: full build, delta segments, tombstones, compaction, garbage collection."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from rifflux_testing import make_settings

from rifflux.config import Settings
from rifflux.embed.hashing import HashEmbedder
from rifflux.index.indexer import Indexer
from rifflux.vectors import publish as publish_module
from rifflux.vectors.cache import open_view
from rifflux.vectors.publish import publish
from rifflux.vectors.segments import (
    MANIFEST_NAME,
    META_INDEX,
    META_PATH,
    read_manifest,
    row_ident,
    row_idents,
    vectors_dir,
)


def doc(word: str, paragraphs: int = 1) -> str:
    body = "\n\n".join(
        f"## Part {i}\n\n{word} paragraph {i} about {word}." for i in range(paragraphs)
    )
    return f"# {word}\n\n{body}\n"


def write_docs(root: Path, docs: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (root / name).write_text(text)


@pytest.fixture
def cfg(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, min_chunk_chars=0, max_chunk_chars=200)


def live_keys(db_path: Path) -> set[tuple[str, int]]:
    view = open_view(vectors_dir(db_path))
    assert view is not None
    keys = set()
    for segment in view.segments:
        for row in segment.meta[segment.live_mask()]:
            keys.add((segment.paths[int(row[META_PATH])], int(row[META_INDEX])))
    return keys


def db_keys(db_path: Path) -> set[tuple[str, int]]:
    import sqlite3

    with sqlite3.connect(db_path) as conn:
        return {
            (p, i)
            for p, i in conn.execute(
                "SELECT f.path, c.chunk_index FROM chunks c JOIN files f ON f.id = c.file_id"
            )
        }


def test_indexer_publishes_one_base_segment_at_the_index_generation(
    tmp_path: Path, cfg: Settings
) -> None:
    write_docs(tmp_path / "docs", {f"d{i}.md": doc(f"w{i}", 3) for i in range(10)})
    Indexer(cfg).run([tmp_path / "docs"])

    found = read_manifest(vectors_dir(cfg.db_path))
    assert found is not None
    manifest = found[0]
    assert manifest.source == "indexer" and len(manifest.segments) == 1
    assert manifest.model == "hash:384" and manifest.dim == 384
    assert manifest.rows == 40 and manifest.tombstones == 0
    assert live_keys(cfg.db_path) == db_keys(cfg.db_path)
    view = open_view(vectors_dir(cfg.db_path))
    assert view is not None
    rows = np.asarray(view.segments[0].vectors)
    # int8 rows, each scaled so that its largest component is ±127.
    assert rows.dtype == np.int8 and np.all(np.abs(rows).max(axis=1) == 127)


def test_small_changes_append_a_delta_and_tombstones(tmp_path: Path, cfg: Settings) -> None:
    root = tmp_path / "docs"
    write_docs(root, {f"d{i:02d}.md": doc(f"w{i}", 3) for i in range(40)})
    Indexer(cfg).run([root])
    (root / "d00.md").unlink()
    (root / "d01.md").write_text(doc("changed", 3))
    (root / "new.md").write_text(doc("fresh", 2))

    Indexer(cfg).run([root])

    manifest = read_manifest(vectors_dir(cfg.db_path))[0]  # type: ignore[index]
    assert [s.rows for s in manifest.segments] == [160, 7]
    # d00 (4 chunks) deleted, d01 (4 chunks) rewritten: 8 tombstones in the base.
    assert manifest.segments[0].dead_rows == 8 and manifest.tombstones == 8
    assert manifest.rows == 159
    assert live_keys(cfg.db_path) == db_keys(cfg.db_path)


def test_compaction_rewrites_one_base_when_changes_pass_the_fraction(
    tmp_path: Path, cfg: Settings
) -> None:
    root = tmp_path / "docs"
    write_docs(root, {f"d{i:02d}.md": doc(f"w{i}", 3) for i in range(10)})
    Indexer(cfg).run([root])
    for i in range(3):  # 12 rewritten rows of 40: 12 tombstones + 12 delta rows > 20%.
        (root / f"d{i:02d}.md").write_text(doc(f"again{i}", 3))

    Indexer(cfg).run([root])

    manifest = read_manifest(vectors_dir(cfg.db_path))[0]  # type: ignore[index]
    assert len(manifest.segments) == 1 and manifest.tombstones == 0
    assert manifest.rows == 40
    assert live_keys(cfg.db_path) == db_keys(cfg.db_path)


def test_too_many_segments_fold_the_deltas_and_keep_the_base(
    tmp_path: Path, cfg: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publish_module, "MAX_SEGMENTS", 3)
    root = tmp_path / "docs"
    write_docs(root, {f"d{i:03d}.md": doc(f"w{i}", 2) for i in range(100)})
    Indexer(cfg).run([root])
    directory = vectors_dir(cfg.db_path)
    base = read_manifest(directory)[0].segments[0].id  # type: ignore[index]
    counts = []
    for i in range(4):
        (root / f"extra{i}.md").write_text(doc(f"extra{i}"))
        Indexer(cfg).run([root])
        counts.append(len(read_manifest(directory)[0].segments))  # type: ignore[index]

    manifest = read_manifest(directory)[0]  # type: ignore[index]
    assert counts == [2, 3, 2, 3]
    assert manifest.segments[0].id == base and manifest.tombstones == 0
    extra_rows = len({k for k in db_keys(cfg.db_path) if k[0].startswith("docs/extra")})
    assert sum(s.rows for s in manifest.segments[1:]) == extra_rows
    assert live_keys(cfg.db_path) == db_keys(cfg.db_path)


def test_publishing_twice_at_one_generation_changes_nothing(tmp_path: Path, cfg: Settings) -> None:
    write_docs(tmp_path / "docs", {"a.md": doc("alpha")})
    Indexer(cfg).run([tmp_path / "docs"])
    before = os.stat(vectors_dir(cfg.db_path) / MANIFEST_NAME).st_ino

    result = publish(cfg.db_path, source="test")

    assert result is not None and result.action == "unchanged"
    assert os.stat(vectors_dir(cfg.db_path) / MANIFEST_NAME).st_ino == before


def test_only_files_of_the_current_and_previous_manifest_are_kept(
    tmp_path: Path, cfg: Settings
) -> None:
    root = tmp_path / "docs"
    write_docs(root, {f"d{i}.md": doc(f"w{i}", 2) for i in range(5)})
    directory = vectors_dir(cfg.db_path)
    manifests = []
    for i in range(4):
        (root / f"d{i}.md").write_text(doc(f"round{i}", 2))
        Indexer(cfg).run([root])
        manifests.append(read_manifest(directory)[0])  # type: ignore[index]

    on_disk = {n for n in os.listdir(directory) if n.endswith((".npy", ".json"))}
    assert on_disk == manifests[-1].files() | manifests[-2].files() | {MANIFEST_NAME}


def test_a_loaded_view_keeps_working_after_its_files_are_deleted(
    tmp_path: Path, cfg: Settings
) -> None:
    root = tmp_path / "docs"
    write_docs(root, {f"d{i}.md": doc(f"w{i}", 2) for i in range(5)})
    Indexer(cfg).run([root])
    old = open_view(vectors_dir(cfg.db_path))
    assert old is not None
    query = HashEmbedder().embed_batch(["w3 paragraph"])[0]
    before = old.search(query, 5)
    for i in range(3):
        (root / f"d{i}.md").write_text(doc(f"gone{i}", 2))
        Indexer(cfg).run([root])
    old_files = old.manifest.files()
    assert not old_files & set(os.listdir(vectors_dir(cfg.db_path)))

    assert old.search(query, 5) == before


def test_a_cache_of_another_database_is_rebuilt_not_reused(tmp_path: Path, cfg: Settings) -> None:
    root = tmp_path / "docs"
    write_docs(root, {"a.md": doc("alpha", 2)})
    Indexer(cfg).run([root])
    old_uid = read_manifest(vectors_dir(cfg.db_path))[0].index_uid  # type: ignore[index]
    for suffix in ("", "-wal", "-shm"):  # what `rifflux index --rebuild` does
        Path(f"{cfg.db_path}{suffix}").unlink(missing_ok=True)
    write_docs(root, {"b.md": doc("beta", 2)})

    Indexer(cfg).run([root])

    manifest = read_manifest(vectors_dir(cfg.db_path))[0]  # type: ignore[index]
    assert manifest.index_uid != old_uid and len(manifest.segments) == 1
    assert live_keys(cfg.db_path) == db_keys(cfg.db_path)


def test_a_reused_rowid_is_a_new_row_for_the_cache(
    tmp_path: Path, cfg: Settings, no_publish_on_index: None
) -> None:
    import sqlite3

    root = tmp_path / "docs"
    write_docs(root, {"a.md": doc("alpha"), "z.md": doc("zulu")})
    Indexer(cfg).run([root])
    publish(cfg.db_path, source="test")
    with sqlite3.connect(cfg.db_path) as conn:
        before = dict(conn.execute("SELECT c.id, c.content FROM chunks c"))
    (root / "z.md").write_text(doc("yankee"))

    Indexer(cfg).run([root])
    result = publish(cfg.db_path, source="test")

    with sqlite3.connect(cfg.db_path) as conn:
        after = dict(conn.execute("SELECT c.id, c.content FROM chunks c"))
    reused = [r for r in after if r in before and after[r] != before[r]]
    assert reused, "precondition: SQLite gave a rewritten chunk a deleted chunk's rowid"
    assert result is not None and result.rows_added == len(reused)
    assert result.rows_removed == len(reused)


def test_row_idents_are_the_row_ident_of_each_row() -> None:
    rows = [
        (1, "a.md", 0, "0" * 64),
        (2**62, "dossier/été/ünïcode.md", 7, "f" * 64),
        (31, "a.md", 12, "ab" * 32),
        *((i, f"docs/d{i % 7}.md", i % 5, f"{i:064x}") for i in range(300)),
    ]
    rowids, paths, indexes, hashes = zip(*rows, strict=True)
    idents = row_idents(rowids, paths, indexes, hashes)
    assert idents.dtype == np.int64
    assert idents.tolist() == [row_ident(*row) for row in rows]
    assert (idents < 0).any() and (idents > 0).any()


def test_a_publish_reads_vectors_in_blocks_without_a_float32_copy_of_all_rows(
    tmp_path: Path, cfg: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracemalloc

    from rifflux.store.connection import open_index
    from rifflux.store.vector_blobs import int8_rows
    from rifflux.vectors.publish import index_head, list_rowids, read_vectors

    write_docs(tmp_path / "docs", {f"d{i}.md": doc(f"w{i}", 40) for i in range(40)})
    Indexer(cfg).run([tmp_path / "docs"])
    monkeypatch.setattr(publish_module, "READ_BLOCK_ROWS", 32)
    conn = open_index(cfg.db_path)
    try:
        _, model, dim = index_head(conn)
        assert model is not None
        rowids = list_rowids(conn, model, dim)[::-1].copy()  # any order is kept
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            rows = read_vectors(conn, rowids, model, dim)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        blobs = [
            conn.execute(
                "SELECT e.vec FROM embeddings e JOIN chunks c ON c.chunk_id = e.chunk_id "
                "WHERE c.id = ?",
                (int(r),),
            ).fetchone()[0]
            for r in rowids
        ]
    finally:
        conn.close()
    assert rowids.shape[0] > 1_500
    # The very bits of decoding all rows at once.
    assert np.array_equal(rows, int8_rows(enumerate(blobs), len(blobs), dim))
    # The int8 result and one block; all rows as float32 first cost 4x the result more.
    assert peak < 2.5 * rows.nbytes, (peak, rows.nbytes)
