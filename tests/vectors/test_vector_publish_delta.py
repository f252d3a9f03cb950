"""A publish reads what changed (issue 22): the chunk change log, checked against full
publishes after random edits, and its fallbacks to listing every row."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from rifflux_testing import make_settings

from rifflux.config import Settings
from rifflux.embed.hashing import HashEmbedder
from rifflux.index.indexer import Indexer
from rifflux.store.changes import PRUNED_KEY
from rifflux.store.connection import open_index
from rifflux.vectors import publish as publish_module
from rifflux.vectors.cache import open_view
from rifflux.vectors.publish import PublishResult, publish
from rifflux.vectors.segments import (
    MANIFEST_NAME,
    META_IDENT,
    META_INDEX,
    META_PATH,
    META_ROWID,
    read_manifest,
    row_ident,
    vectors_dir,
)

# Each test publishes itself, to see the result.
pytestmark = pytest.mark.usefixtures("no_publish_on_index")

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "omega")


def doc(rng: random.Random, sections: int) -> str:
    parts = [f"# {rng.choice(WORDS)} guide"]
    for i in range(sections):
        words = " ".join(rng.choice(WORDS) for _ in range(12))
        parts.append(f"## Part {i}\n\n{words}.")
    return "\n\n".join(parts) + "\n"


@pytest.fixture
def cfg(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, min_chunk_chars=0, max_chunk_chars=120, vector_index="exact")


def run_publish(db_path: Path, **kwargs: object) -> PublishResult:
    result = publish(db_path, source="test", vector_index="exact", **kwargs)  # type: ignore[arg-type]
    assert result is not None
    return result


def cached_rows(db_path: Path) -> dict[int, tuple[int, str, int, bytes]]:
    """Every live cached row by rowid: identity, path, chunk index, int8 vector bytes."""
    view = open_view(vectors_dir(db_path))
    assert view is not None
    rows: dict[int, tuple[int, str, int, bytes]] = {}
    for segment in view.segments:
        for position in np.flatnonzero(segment.live_mask()):
            meta = segment.meta[position]
            rowid = int(meta[META_ROWID])
            assert rowid not in rows, f"rowid {rowid} is live twice"
            rows[rowid] = (
                int(meta[META_IDENT]),
                segment.paths[int(meta[META_PATH])],
                int(meta[META_INDEX]),
                np.asarray(segment.vectors[position]).tobytes(),
            )
    return rows


def full_publish_of(db_path: Path, tmp_path: Path) -> Path:
    """A copy of the database with a cache built by a full publish (the reference)."""
    copy = tmp_path / "reference" / "index.db"
    if copy.parent.exists():
        shutil.rmtree(copy.parent)
    copy.parent.mkdir(parents=True)
    with sqlite3.connect(db_path) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    result = run_publish(copy, full=True)
    assert result.action == "full"
    return copy


def assert_same_as_full_publish(db_path: Path, tmp_path: Path) -> None:
    reference = full_publish_of(db_path, tmp_path)
    assert cached_rows(db_path) == cached_rows(reference)
    query = HashEmbedder().embed_batch(["alpha beta guide part"])[0]
    ours, theirs = open_view(vectors_dir(db_path)), open_view(vectors_dir(reference))
    assert ours is not None and theirs is not None
    assert ours.search(query, 10) == theirs.search(query, 10)


def chunk_count(db_path: Path, path: str) -> int:
    with sqlite3.connect(db_path) as conn:
        row = conn.execute(
            "SELECT count(*) FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.path = ?",
            (path,),
        ).fetchone()
    return int(row[0])


def indexed_docs(
    tmp_path: Path, cfg: Settings, seed: int, count: int
) -> tuple[Path, random.Random]:
    """``count`` files of 3 sections under ``tmp_path/docs``, indexed in-process; the
    folder and the generator that wrote them (for the edits that follow)."""
    rng = random.Random(seed)
    root = tmp_path / "docs"
    root.mkdir()
    width = len(str(count - 1))
    for i in range(count):
        (root / f"d{i:0{width}d}.md").write_text(doc(rng, 3))
    Indexer(cfg).run([root])
    return root, rng


def test_one_edit_publish_reads_the_edited_files_rows_not_the_index(
    tmp_path: Path, cfg: Settings
) -> None:
    root, rng = indexed_docs(tmp_path, cfg, 7, 300)
    first = run_publish(cfg.db_path)
    total = first.manifest.rows
    assert total >= 900 and first.rows_read == total  # a first publish lists every row
    (root / "d123.md").write_text(doc(rng, 4))

    Indexer(cfg).run([root])
    result = run_publish(cfg.db_path)

    edited = chunk_count(cfg.db_path, "docs/d123.md")
    # The old chunks' rowids (deleted) and the new ones' (vectors attached): at most
    # both sets, never the index's ~1,000 rows.
    assert 0 < result.rows_read <= edited + 4
    assert result.action == "delta" and result.rows_added == edited
    assert result.manifest.rows == total + edited - 4
    assert_same_as_full_publish(cfg.db_path, tmp_path)


def apply_random_step(rng: random.Random, root: Path, names: list[str], step: int) -> str:
    """Edit, delete, add, rename or touch files; the kind of step taken."""
    kind = rng.choice(["edit", "edit", "delete", "add", "rename", "touch", "mixed"])
    if kind in ("edit", "mixed") and names:
        for name in rng.sample(names, min(len(names), rng.randint(1, 3))):
            path = root / name
            text = path.read_text()
            # Keep the first sections sometimes: their chunks keep their text.
            cut = text.split("## Part 1")[0] if rng.random() < 0.5 else ""
            path.write_text(cut + doc(rng, rng.randint(1, 4)))
    if kind in ("delete", "mixed") and len(names) > 3:
        name = rng.choice(names)
        (root / name).unlink()
        names.remove(name)
    if kind in ("add", "mixed"):
        name = f"new{step:02d}-{rng.randint(0, 999)}.md"
        (root / name).write_text(doc(rng, rng.randint(1, 5)))
        names.append(name)
    if kind == "rename" and names:
        # Same text under a new path: its vectors are reused by text hash.
        name = rng.choice(names)
        new = f"moved{step:02d}-{name}"
        (root / name).rename(root / new)
        names[names.index(name)] = new
    if kind == "touch" and names:
        (root / rng.choice(names)).touch()
    return kind


@pytest.mark.parametrize("always_log", [False, True], ids=["default", "log-only"])
def test_incremental_publishes_equal_a_full_publish_after_random_steps(
    tmp_path: Path, cfg: Settings, monkeypatch: pytest.MonkeyPatch, always_log: bool
) -> None:
    monkeypatch.setattr(publish_module, "MAX_SEGMENTS", 3)
    if always_log:
        # Never fall back to listing every row for a large change: the log alone.
        monkeypatch.setattr(publish_module, "LIST_ALL_FRACTION", float("inf"))
    rng = random.Random(22 + always_log)
    root = tmp_path / "docs"
    root.mkdir()
    names = [f"d{i:02d}.md" for i in range(30)]
    for name in names:
        (root / name).write_text(doc(rng, rng.randint(1, 4)))
    Indexer(cfg).run([root])
    run_publish(cfg.db_path)
    seen: set[str] = set()
    kinds: set[str] = set()
    changed = read_changes = 0
    for step in range(14):
        kinds.add(apply_random_step(rng, root, names, step))
        if step % 5 == 4:
            # Rows without their vectors, published, then the vectors in the next job
            # (a mid-job publish between a batch's two phases).
            with monkeypatch.context() as patch:
                patch.setattr(Indexer, "_embed_missing", lambda self, writer, report: None)
                Indexer(cfg).run([root])
            run_publish(cfg.db_path)
            assert_same_as_full_publish(cfg.db_path, tmp_path)
        Indexer(cfg).run([root])
        result = run_publish(cfg.db_path)
        seen.add(result.action)
        changed += result.action != "unchanged"
        read_changes += result.action != "unchanged" and result.rows_read < result.manifest.rows
        assert_same_as_full_publish(cfg.db_path, tmp_path)
    assert read_changes == changed if always_log else read_changes >= 3
    assert {"delta", "full"} <= seen
    assert {"edit", "delete", "add", "rename"} <= kinds


def test_an_index_without_the_log_gets_it_and_lists_every_row_once(
    tmp_path: Path, cfg: Settings
) -> None:
    root, rng = indexed_docs(tmp_path, cfg, 3, 40)
    run_publish(cfg.db_path)
    # What an index and a cache of the Rifflux before the log look like.
    with sqlite3.connect(cfg.db_path) as conn:
        triggers = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' "
                "AND name LIKE 'chunk_changes_%'"
            )
        ]
        assert len(triggers) == 6
        for name in triggers:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TABLE chunk_changes")
        conn.execute("DELETE FROM index_metadata WHERE key = ?", (PRUNED_KEY,))
    manifest_path = vectors_dir(cfg.db_path) / MANIFEST_NAME
    data = json.loads(manifest_path.read_text())
    del data["changes"]
    manifest_path.write_text(json.dumps(data))
    (root / "d05.md").write_text(doc(rng, 2))

    Indexer(cfg).run([root])  # a writer of this version: the log and its triggers are back
    upgraded = run_publish(cfg.db_path)
    (root / "d06.md").write_text(doc(rng, 2))
    Indexer(cfg).run([root])
    next_one = run_publish(cfg.db_path)

    assert upgraded.rows_read == upgraded.manifest.rows  # one full listing
    assert upgraded.manifest.changes is not None
    assert next_one.rows_read < 10 and next_one.action == "delta"
    assert_same_as_full_publish(cfg.db_path, tmp_path)


def test_a_manifest_behind_the_pruned_log_lists_every_row(tmp_path: Path, cfg: Settings) -> None:
    root, rng = indexed_docs(tmp_path, cfg, 5, 40)
    run_publish(cfg.db_path)
    manifest_path = vectors_dir(cfg.db_path) / MANIFEST_NAME
    older = manifest_path.read_bytes()
    (root / "d01.md").write_text(doc(rng, 2))
    Indexer(cfg).run([root])
    run_publish(cfg.db_path)  # consumes and prunes the entries of d01's edit
    with open_index(cfg.db_path) as conn:
        assert conn.execute("SELECT count(*) FROM chunk_changes").fetchone()[0] == 0
    # The cache as it was before (its files are still kept): the log no longer holds
    # d01's edit, so trusting it would keep d01's old rows.
    manifest_path.write_bytes(older)
    (root / "d02.md").write_text(doc(rng, 2))
    Indexer(cfg).run([root])

    result = run_publish(cfg.db_path)

    assert result.rows_read == result.manifest.rows
    assert read_manifest(vectors_dir(cfg.db_path)) is not None
    assert_same_as_full_publish(cfg.db_path, tmp_path)


def test_changed_rows_are_sorted_as_a_full_listing_sorts_them() -> None:
    """Rows arrive in any order (the changed ones in rowid chunks); they are read into
    columns and sorted there, which must give the columns of the rows sorted by (path,
    chunk_index) as Python rows."""
    rng = random.Random(22)
    paths = [f"docs/{rng.choice('abc')}/{rng.randrange(60):02d}.md" for _ in range(40)]
    rows = [
        (rowid, rng.choice(paths), rng.randrange(12), f"{rng.getrandbits(256):064x}")
        for rowid in rng.sample(range(1, 10_000), 400)
    ]
    rows = list({(path, index): (r, path, index, h) for r, path, index, h in rows}.values())
    rng.shuffle(rows)
    got = publish_module._db_rows(7, "hash:384", 384, rows)
    ordered = sorted(rows, key=lambda r: (r[1], r[2]))
    names = sorted({r[1] for r in rows})
    assert got.path_names == names
    want = {
        "rowids": [r[0] for r in ordered],
        "idents": [row_ident(*r) for r in ordered],
        "path_ordinals": [names.index(r[1]) for r in ordered],
        "chunk_indexes": [r[2] for r in ordered],
    }
    for field, values in want.items():
        assert getattr(got, field).tolist() == values, field
    empty = publish_module._db_rows(7, "hash:384", 384, [])
    assert empty.rowids.shape == (0,) and empty.path_names == []
