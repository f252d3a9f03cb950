"""The vector cache publish after one edited file, at a generated corpus's scale.

Generates ``--files`` markdown files with ``scale_corpus.py`` (deterministic) unless the
work directory has them, indexes them in-process (hash embedder, ``--vector-index``,
default exact), then ``--edits`` times: rewrites one file, re-indexes in-process with
the indexer's own publish turned off, and times one :func:`~rifflux.vectors.publish.
publish` alone. Prints per edit the publish's seconds, its action, the rows it added and
removed, and the database rows it read (``rows_read``; a Rifflux whose
``PublishResult`` has no such field lists every vector row: printed as ``all``).

    nice -n 10 .venv/bin/python benchmarks/publish_delta.py --files 10000 \
        --workdir /tmp/publish-delta

``--keep`` keeps the corpus and the index, so a second run (another build of Rifflux,
e.g. with ``PYTHONPATH`` at an older checkout) measures the same index.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from scale_corpus import generate

import rifflux.index.indexer as indexer_module
from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.vectors.publish import publish

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "awesome-copilot"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--edits", type=int, default=5)
    parser.add_argument("--vector-index", default="exact")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args()

    corpus = args.workdir / "corpus"
    settings = Settings(
        db_path=args.workdir / "index" / "index.db",
        base_dir=args.workdir,
        embedding_backend="hash",
        vector_index=args.vector_index,
    )
    print(
        f"machine: {platform.node()} {os.cpu_count()} cpus, load {os.getloadavg()}; "
        f"rifflux from {Path(indexer_module.__file__).parents[1]}"
    )
    if not corpus.exists():
        started = time.perf_counter()
        generate(corpus, args.files, 13, args.source)
        print(f"generated {args.files} files in {time.perf_counter() - started:.1f} s")
    if not settings.db_path.exists():
        started = time.perf_counter()
        report = Indexer(settings).run([corpus])
        print(
            f"indexed {report.files_indexed} files, {report.chunks_written} chunks in "
            f"{time.perf_counter() - started:.1f} s"
        )
    # Bring the cache to the index's state first (and, on an index written by an older
    # Rifflux, take its one full listing), so each edit's publish is its own.
    started = time.perf_counter()
    first = publish(settings.db_path, source="benchmark", vector_index=args.vector_index)
    print(f"first publish: {first.action if first else None} {time.perf_counter() - started:.2f} s")

    # The edits' publishes are timed alone: the indexer's own publish is turned off.
    indexer_module.publish_quietly = lambda *a, **k: None  # type: ignore[assignment]
    files = sorted(corpus.rglob("*.md"))
    seconds = []
    for i in range(args.edits):
        victim = files[(i * 7919) % len(files)]
        victim.write_text(victim.read_text() + f"\n\nEdit {i} of {time.time()} adds a line.\n")
        Indexer(settings).run([corpus])
        started = time.perf_counter()
        result = publish(settings.db_path, source="benchmark", vector_index=args.vector_index)
        took = time.perf_counter() - started
        seconds.append(took)
        assert result is not None
        rows_read = getattr(result, "rows_read", None)
        print(
            f"edit {i}: {victim.relative_to(corpus)} publish {took:.3f} s, {result.action}, "
            f"+{result.rows_added} -{result.rows_removed}, rows read "
            f"{'all' if rows_read is None else rows_read} of {result.manifest.rows}"
        )
    print(
        f"publish after one edit: median {statistics.median(seconds):.3f} s, "
        f"min {min(seconds):.3f} s over {args.edits} edits; load {os.getloadavg()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
