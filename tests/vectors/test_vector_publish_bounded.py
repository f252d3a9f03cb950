"""A publish in bounded memory (issue 22): a full publish writes base segments of at most
``BASE_SEGMENT_ROWS``, one at a time, and searches find what one segment would; deltas,
folds and full rewrites keep working on several base segments."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from rifflux.store.connection import open_index
from rifflux.vectors import pages, quantize, segments
from rifflux.vectors import publish as publish_module
from rifflux.vectors.cache import open_view
from rifflux.vectors.publish import PublishResult, publish
from rifflux.vectors.scan import search_segments
from rifflux.vectors.segments import META_ROWID, Segment, live_column, vectors_dir

MODEL, DIM, CHUNKS = "hash:384", 384, 4


def add_files(db_path: Path, first: int, count: int, seed: int) -> None:
    """Files ``first`` .. ``first + count - 1`` of CHUNKS chunks each, with random int8
    rows, written with SQL into a real index (the triggers log them); a new generation."""
    rng = np.random.default_rng(seed)
    vectors = rng.integers(-127, 128, size=(count * CHUNKS, DIM), dtype=np.int8)
    with sqlite3.connect(db_path, isolation_level=None) as conn:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("BEGIN IMMEDIATE")
        for f in range(first, first + count):
            file_id = conn.execute(
                "INSERT INTO files(path, mtime_ns, size_bytes, sha256, indexed_at) "
                "VALUES (?, 0, 0, '', 0)",
                (f"docs/d{f % 7}/f{f:05d}.md",),
            ).lastrowid
            for k in range(CHUNKS):
                chunk_id = f"{f}-{k}-{seed}"
                conn.execute(
                    "INSERT INTO chunks(chunk_id, file_id, chunk_index, heading_path, "
                    "content, embed_sha256) VALUES (?, ?, ?, '', '', ?)",
                    (chunk_id, file_id, k, f"{seed}-{f}-{k}"),
                )
                conn.execute(
                    "INSERT INTO embeddings(chunk_id, model, dim, vec) VALUES (?, ?, ?, ?)",
                    (chunk_id, MODEL, DIM, vectors[(f - first) * CHUNKS + k].tobytes()),
                )
        bump(conn)
        conn.execute("COMMIT")


def delete_files(db_path: Path, files: list[int]) -> None:
    with sqlite3.connect(db_path, isolation_level=None) as conn:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "DELETE FROM files WHERE path = ?", ((f"docs/d{f % 7}/f{f:05d}.md",) for f in files)
        )
        bump(conn)
        conn.execute("COMMIT")


def bump(conn: sqlite3.Connection) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO index_metadata(key, value) VALUES "
        "('embedding_model', ?), ('embedding_dim', ?)",
        (MODEL, str(DIM)),
    )
    conn.execute(
        "UPDATE index_metadata SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'"
    )


def new_index(tmp_path: Path, files: int) -> Path:
    db_path = tmp_path / "index" / "index.db"
    db_path.parent.mkdir(parents=True)
    open_index(db_path).close()
    add_files(db_path, 0, files, seed=1)
    return db_path


def run_publish(db_path: Path, *, full: bool = False) -> PublishResult:
    result = publish(db_path, source="test", full=full, vector_index="exact")
    assert result is not None
    return result


def answers(db_path: Path, queries: np.ndarray) -> list[list[tuple[int, tuple[str, int], float]]]:
    """The top 25 (rowid, key, cosine) of each query over the published cache."""
    view = open_view(vectors_dir(db_path))
    assert view is not None
    return [
        [(c.row_id, c.key, c.cosine) for c in search_segments(view.segments, q, 25)]
        for q in queries
    ]


def db_rowids(db_path: Path) -> np.ndarray:
    with sqlite3.connect(db_path) as conn:
        return np.sort(np.array([r[0] for r in conn.execute("SELECT id FROM chunks")]))


QUERIES = np.random.default_rng(7).standard_normal((12, DIM))


def test_a_full_publish_writes_bounded_base_segments_that_search_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_path = new_index(tmp_path, 800)  # 3,200 rows
    monkeypatch.setattr(publish_module, "BASE_SEGMENT_ROWS", 1_000)
    result = run_publish(db_path)
    manifest = result.manifest
    assert result.action == "full"
    assert [s.rows for s in manifest.segments] == [1_000, 1_000, 1_000, 200]
    assert manifest.base_segments == 4 and manifest.rows == 3_200
    split = answers(db_path, QUERIES)

    monkeypatch.setattr(publish_module, "BASE_SEGMENT_ROWS", 1_000_000)
    one = run_publish(db_path, full=True).manifest
    assert [s.rows for s in one.segments] == [3_200] and one.base_segments == 1
    assert answers(db_path, QUERIES) == split


def test_deltas_folds_and_rewrites_keep_every_base_segment_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_path = new_index(tmp_path, 800)
    monkeypatch.setattr(publish_module, "BASE_SEGMENT_ROWS", 1_000)
    monkeypatch.setattr(publish_module, "MAX_SEGMENTS", 3)
    bases = [s.id for s in run_publish(db_path).manifest.segments]
    assert len(bases) == 4

    # Small changes: deltas, then a fold, on top of the four base segments kept as
    # they are (the policy counts them as one base).
    actions = []
    for step in range(4):
        delete_files(db_path, [3 + 11 * step])
        add_files(db_path, 1_000 + 2 * step, 2, seed=10 + step)
        result = run_publish(db_path)
        actions.append(result.action)
        manifest = result.manifest
        assert [s.id for s in manifest.segments[:4]] == bases and manifest.base_segments == 4
        assert np.array_equal(live_column(view_segments(db_path), META_ROWID), db_rowids(db_path))
        assert len(manifest.segments) <= 4 + 2
    assert actions == ["delta", "delta", "fold", "delta"]
    incremental = answers(db_path, QUERIES)
    run_publish(db_path, full=True)
    assert answers(db_path, QUERIES) == incremental

    # A large change: the full rewrite splits the rows into bounded base segments again.
    delete_files(db_path, list(range(100, 300)))
    result = run_publish(db_path)
    assert result.action == "full" and result.manifest.base_segments == 3
    assert [s.rows for s in result.manifest.segments] == [1_000, 1_000, 416]
    assert np.array_equal(live_column(view_segments(db_path), META_ROWID), db_rowids(db_path))


def view_segments(db_path: Path) -> list[Segment]:
    view = open_view(vectors_dir(db_path))
    assert view is not None
    return list(view.segments)


def full_publish_peak(tmp_path: Path, files: int) -> int:
    """Peak traced memory of a full publish (after one untraced: one-time allocations)."""
    db_path = new_index(tmp_path, files)
    run_publish(db_path)
    tracemalloc.start()
    try:
        run_publish(db_path, full=True)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_full_publish_whose_memory_does_not_grow_with_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publish_module, "BASE_SEGMENT_ROWS", 500)
    # Its int64 block (3 MB) would outweigh the rows of the small publish.
    monkeypatch.setattr(quantize, "SCAN_BLOCK_ROWS", 64)
    small = full_publish_peak(tmp_path / "small", 300)  # 1,200 rows
    large = full_publish_peak(tmp_path / "large", 3_000)  # 12,000 rows
    # Every row's vector (twice: np.save copied it) and a list of every row grew 10x with
    # the rows (1.2 MB -> 11.8 MB here); now one segment's vectors and a few int64
    # columns of the listing (0.74 MB -> 1.69 MB).
    print(small, large)
    assert large < 4 * small, (small, large)


def test_segment_arrays_are_written_as_the_bytes_np_save_writes(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    arrays = {
        "rows.npy": rng.integers(-127, 128, size=(3_000, DIM), dtype=np.int8),
        "meta.npy": rng.integers(-(2**62), 2**62, size=(3_000, 5), dtype=np.int64),
        "empty.npy": np.zeros((0, DIM), np.int8),
    }
    for name, array in arrays.items():
        digest = segments._save_npy(tmp_path, name, array)
        np.save(tmp_path / f"ref-{name}", array, allow_pickle=False)
        written = (tmp_path / name).read_bytes()
        assert written == (tmp_path / f"ref-{name}").read_bytes()
        assert digest == hashlib.sha256(written).hexdigest()


def test_a_segment_written_in_blocks_is_the_segment_written_at_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    rows = 1_000
    vectors = rng.integers(-127, 128, size=(rows, DIM), dtype=np.int8)
    ids = np.arange(rows, dtype=np.int64)
    columns = (ids, ids * 7, ids // 10, ids % 10)
    names = [f"p{i:03d}.md" for i in range(100)]
    paths = [names[k] for k in columns[2]]
    whole = segments.write_segment(tmp_path, 1, vectors, *columns[:2], paths, columns[3])
    blocks = (vectors[at : at + 300] for at in range(0, rows, 300))
    parts = segments.write_segment_blocks(tmp_path, 1, DIM, blocks, *columns[:3], names, columns[3])
    for mine, theirs in zip(
        segments.segment_files(parts.id), segments.segment_files(whole.id), strict=True
    ):
        assert (tmp_path / mine).read_bytes() == (tmp_path / theirs).read_bytes()
    assert [d for _, d in parts.sha256] == [d for _, d in whole.sha256]
    with pytest.raises(ValueError, match="not 1000"):
        segments.write_segment_blocks(
            tmp_path, 1, DIM, [vectors[:10]], *columns[:3], names, columns[3]
        )


def test_dropped_pages_of_a_mapped_segment_read_back_the_same_rows(tmp_path: Path) -> None:
    rows = np.random.default_rng(9).integers(-127, 128, size=(2_000, DIM), dtype=np.int8)
    np.save(tmp_path / "rows.npy", rows)
    mapped = np.load(tmp_path / "rows.npy", mmap_mode="r")
    assert np.array_equal(mapped, rows)
    pages.drop_pages(mapped)
    pages.drop_pages(mapped[10:20])
    pages.drop_pages(rows)  # in memory: nothing to drop
    assert np.array_equal(mapped, rows) and np.array_equal(mapped[10:20], rows[10:20])


def _resident_kib(path: Path) -> int:
    """This process's resident KiB of its mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):  # a mapping's header line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_a_sample_gathered_from_a_mapped_segment_leaves_its_pages_dropped(
    tmp_path: Path,
) -> None:
    """The HNSW sample check copies 20k rows spread over a 262k-row segment: read at once,
    most of the segment's pages stayed resident until the check ended."""
    rows = np.random.default_rng(5).integers(-127, 128, size=(60_000, DIM), dtype=np.int8)
    path = tmp_path / "rows.npy"
    np.save(path, rows)
    positions = np.sort(np.random.default_rng(6).choice(60_000, size=6_000, replace=False))

    mapped = np.load(path, mmap_mode="r")
    sample = pages.gather_rows(mapped, positions)
    assert np.array_equal(sample, rows[positions]) and sample.flags.c_contiguous
    assert _resident_kib(path) == 0

    plain = np.ascontiguousarray(mapped[positions])
    assert np.array_equal(plain, sample)
    assert _resident_kib(path) > rows.nbytes // 1024 // 2
