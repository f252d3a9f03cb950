"""Proof: searches in another process never fail while a job edits, adds and deletes."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rifflux_testing import REPO_ROOT, make_settings, wait_until

from rifflux.index.indexer import Indexer
from rifflux.search.service import SearchService
from rifflux.vectors.publish import publish
from rifflux.vectors.segments import read_manifest, vectors_dir

LOOP = Path(__file__).with_name("vector_search_loop.py")
WORDS = [
    "amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo",
    "juniper", "kelp", "lagoon", "meadow", "nectar", "onyx", "pollen", "quartz", "raven",
]  # fmt: skip
EDIT_RUNS = 40
"""Jobs run while the other process searches (about 8 s on an idle 2-core machine)."""
MIN_SEARCHES = 50
"""Searches the other process must have done before the jobs stop (half of them strict)."""
BOUND_S = 600.0
"""Generous bound: it only ends a test whose searcher stopped searching."""
# Enough files that a run changes a few percent: delta segments and tombstones.
START_FILES = 120


def random_doc(rng: random.Random) -> str:
    sections = [
        f"## {rng.choice(WORDS)}\n\n" + " ".join(rng.choices(WORDS, k=rng.randint(8, 40)))
        for _ in range(rng.randint(1, 4))
    ]
    return "# Notes\n\n" + "\n\n".join(sections) + "\n"


def searcher_progress(progress: Path) -> dict[str, int]:
    """The searcher's searches so far, and how many of its cache samples were stale."""
    try:
        return json.loads(progress.read_text())
    except FileNotFoundError:
        return {"searches": 0, "stale": 0}


def done(runs: int, progress: dict[str, int]) -> bool:
    """Both sides did their share, and the searcher saw the cache lag behind a job."""
    return runs >= EDIT_RUNS and progress["searches"] >= MIN_SEARCHES and progress["stale"] > 0


def newest_file(db_path: Path, root: Path) -> Path:
    """The file that owns the highest chunk rowid."""
    with sqlite3.connect(db_path) as conn:
        path = conn.execute(
            "SELECT f.path FROM chunks c JOIN files f ON f.id = c.file_id ORDER BY c.id DESC"
        ).fetchone()[0]
    return root / Path(path).name


@pytest.mark.parametrize("vector_index", ["auto", "hnsw"])
def test_searches_in_another_process_only_return_resolvable_chunks_while_indexing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vector_index: str
) -> None:
    """``hnsw``: every segment has an HNSW graph, so searches go through the graphs while
    publishes replace them (one generation per search, exact cosines, no deleted chunk)."""
    rng = random.Random(7)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(START_FILES):
        (root / f"n{i:03d}.md").write_text(random_doc(rng))
    # Small batches: every run writes several transactions before it publishes.
    cfg = make_settings(
        tmp_path, min_chunk_chars=0, batch_target_bytes=600, vector_index=vector_index
    )
    Indexer(cfg).run([root])
    ready, stop, progress = (tmp_path / name for name in ("ready", "stop", "progress"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RIFFLUX_", "RIFLUX_"))}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["RIFFLUX_VECTOR_INDEX"] = vector_index
    paths = [cfg.db_path, tmp_path, ready, stop, progress]
    searcher = subprocess.Popen(
        [sys.executable, str(LOOP), *map(str, paths)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(ready.exists, timeout=30)
        runs = 0
        next_id = START_FILES
        deadline = time.monotonic() + BOUND_S
        # Jobs go on until both sides have done their share, however slow either runs.
        while not done(runs, searcher_progress(progress)):
            assert time.monotonic() < deadline, (runs, searcher_progress(progress))
            assert searcher.poll() is None, "the searcher stopped"
            # One "job": its batches land one transaction at a time, it publishes at the end.
            monkeypatch.setattr("rifflux.index.indexer.publish_quietly", lambda *a, **k: None)
            files = sorted(root.glob("*.md"))
            for path in rng.sample(files, 2):
                path.write_text(random_doc(rng))
            if len(files) > START_FILES - 20:
                rng.choice(files).unlink()
            for _ in range(rng.randint(0, 2)):
                (root / f"n{next_id:03d}.md").write_text(random_doc(rng))
                next_id += 1
            Indexer(cfg).run([root])
            # Rewriting the newest file hands its deleted chunks' rowids to new chunks.
            newest_file(cfg.db_path, root).write_text(random_doc(rng))
            Indexer(cfg).run([root])
            time.sleep(0.1)
            monkeypatch.undo()
            publish(cfg.db_path, source="finalize", vector_index=vector_index)
            runs += 1
        stop.touch()
        out, _ = searcher.communicate(timeout=60)
    finally:
        if searcher.poll() is None:
            searcher.kill()
            searcher.wait()
    # The last line is the report (structlog writes its lines before it).
    report = json.loads(out.decode().strip().splitlines()[-1])

    assert report["error_count"] == 0, report["errors"]
    assert report["searches"] >= MIN_SEARCHES and report["strict"] >= MIN_SEARCHES // 2
    assert report["results"] > 0
    assert report["states"].get("stale", 0) > 0, "the lagging-cache path was never exercised"
    manifest = read_manifest(vectors_dir(cfg.db_path))[0]  # type: ignore[index]
    assert all(bool(s.hnsw) == (vector_index == "hnsw") for s in manifest.segments)
    # The job has completed: a new chunk is the top semantic hit of the next search.
    (root / "unique.md").write_text("# Unique\n\nxylophonic quixotry zeugmatic\n")
    Indexer(cfg).run([root])
    hits = SearchService(cfg).search("xylophonic quixotry zeugmatic", top_k=1, mode="semantic")
    assert hits[0]["path"] == "docs/unique.md"
