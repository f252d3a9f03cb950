"""Sections of a file by the headings its chunks record (rifflux.search.sections), and
how an index written before chunks recorded them still answers (issue 20, finding 8)."""

from __future__ import annotations

import json
import sqlite3
from itertools import pairwise
from pathlib import Path

import pytest
from rifflux_testing import make_settings

from rifflux.errors import NotFoundError
from rifflux.index.indexer import Indexer
from rifflux.search.sections import (
    ChunkHeadings,
    Part,
    breadcrumbs,
    parts_of,
    resolve_heading,
    section_parts,
)
from rifflux.search.service import SearchService
from rifflux.store.connection import open_index

GUIDE = (
    "# Guide\n\nAbout.\n\n## Install\n\nGet it.\n\n### Linux\n\napt.\n\n"
    "### Windows\n\nexe.\n\n## Usage\n\nRun it.\n"
)
# The merged chunk of GUIDE, as stored: offsets of its headings in its content.
MERGED = ChunkHeadings(
    "Guide",
    len(GUIDE.strip()),
    [
        (GUIDE.index("# Guide"), "Guide"),
        (GUIDE.index("## Install"), "Guide > Install"),
        (GUIDE.index("### Linux"), "Guide > Install > Linux"),
        (GUIDE.index("### Windows"), "Guide > Install > Windows"),
        (GUIDE.index("## Usage"), "Guide > Usage"),
    ],
)


def test_a_chunk_is_cut_into_parts_at_its_headings() -> None:
    parts = parts_of(0, MERGED)
    assert [p.heading_path for p in parts] == [path for _, path in MERGED.headings or ()]
    assert parts[0].start == 0 and parts[-1].end == MERGED.length
    assert all(a.end == b.start for a, b in pairwise(parts))


def test_a_chunk_continuing_a_section_starts_with_its_heading_path() -> None:
    continued = ChunkHeadings("Guide > Install", 50, [(20, "Guide > Usage")])
    assert parts_of(3, continued) == [
        Part(3, 0, 20, "Guide > Install"),
        Part(3, 20, 50, "Guide > Usage"),
    ]


def test_a_chunk_without_recorded_headings_is_one_part() -> None:
    assert parts_of(1, ChunkHeadings("Guide > Install", 40, None)) == [
        Part(1, 0, 40, "Guide > Install")
    ]


def test_a_section_joins_its_adjacent_parts_and_spans_chunks() -> None:
    install = section_parts([MERGED], "Guide > Install")
    assert install == [
        Part(0, GUIDE.index("## Install"), GUIDE.index("## Usage"), "Guide > Install")
    ]
    continued = ChunkHeadings("Guide > Install > Windows", 30, [(10, "Guide > Usage")])
    both = section_parts([MERGED, continued], "Guide > Install")
    assert both[1] == Part(1, 0, 10, "Guide > Install > Windows")


def test_every_recorded_heading_resolves() -> None:
    paths = breadcrumbs([MERGED])
    assert resolve_heading("linux", paths, "g.md") == "Guide > Install > Linux"
    assert resolve_heading("Install > Windows", paths, "g.md") == "Guide > Install > Windows"
    with pytest.raises(NotFoundError, match="close headings: Guide > Usage"):
        resolve_heading("Usag", paths, "g.md")


def drop_headings_column(db: Path) -> None:
    """Make ``db`` an index as a Rifflux before issue 20 wrote it."""
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE chunks DROP COLUMN headings")
    conn.commit()
    conn.close()


def test_an_older_index_answers_by_heading_path_until_reindexed(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(GUIDE, encoding="utf-8")
    config = make_settings(tmp_path)
    Indexer(config).run([docs])
    drop_headings_column(config.db_path)

    # A reader of the older index: no headings, sections from heading_path alone.
    service = SearchService(config)
    [chunk] = service.get_file("docs/guide.md")["chunks"]
    assert chunk["headings"] is None and chunk["heading_path"] == "Guide"
    assert service.get_chunk(chunk["chunk_id"])["headings"] is None
    assert service.get_file("docs/guide.md", heading="guide")["chunks"] == [chunk]
    with pytest.raises(NotFoundError, match=r"close headings: Guide$"):
        service.get_file("docs/guide.md", heading="Linux")
    service.close()

    # A writer adds the column (no rebuild); the unchanged file's row keeps NULL.
    open_index(config.db_path).close()
    Indexer(config).run([docs])
    service = SearchService(config)
    assert service.get_file("docs/guide.md")["chunks"][0]["headings"] is None
    service.close()

    # Reindexing with --force records them, as [offset, breadcrumb] pairs.
    Indexer(config).run([docs], force=True)
    conn = sqlite3.connect(config.db_path)
    [(stored,)] = conn.execute("SELECT headings FROM chunks").fetchall()
    conn.close()
    assert json.loads(stored) == [list(mark) for mark in MERGED.headings or ()]
    service = SearchService(config)
    found = service.get_file("docs/guide.md", heading="Linux")
    assert found["heading"] == "Guide > Install > Linux"
    assert [c["content"] for c in found["chunks"]] == ["### Linux\n\napt."]
    service.close()


def test_a_cut_chunk_keeps_its_headings_within_a_token_budget(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    long_install = "## Install\n\n" + " ".join(f"word{i}" for i in range(400))
    (docs / "g.md").write_text(f"# G\n\nIntro.\n\n{long_install}\n\n## Usage\n\nRun.\n")
    config = make_settings(tmp_path, max_chunk_chars=4000, min_chunk_chars=4000)
    Indexer(config).run([docs])
    service = SearchService(config)
    [chunk] = service.get_file("docs/g.md", max_tokens=300)["chunks"]
    assert chunk["truncated"]
    assert all(h["offset"] < len(chunk["content"]) for h in chunk["headings"])
    assert [h["heading_path"] for h in chunk["headings"]] == ["G", "G > Install"]
    service.close()
