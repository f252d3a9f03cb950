"""CPU seconds of the chunk step's Python work, part by part, on a markdown corpus.

What a job's chunk step computes before it writes (``rifflux.index.prepare.chunk_file``:
front matter, chunks, the kind rules of ``rifflux.index.kinds``, hashes) and the CJK check
of each chunk the writer makes (``rifflux.store.cjk.chunk_has_cjk``), over every file of
the corpus (awesome-copilot by default) with the shipped chunk bounds. CPU seconds
(``time.process_time``), best of ``--rounds``. For counts that do not move with the
machine's load, run one round under callgrind and read its instruction total:

    .venv/bin/python benchmarks/chunk_step_cpu.py
    valgrind --tool=callgrind .venv/bin/python benchmarks/chunk_step_cpu.py --rounds 1

To compare with another checkout, run its copy with ``PYTHONPATH`` set to it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import rifflux
from rifflux.config import Settings
from rifflux.index import kinds
from rifflux.index.changes import FileWork, decode_text
from rifflux.index.chunker import chunk_document
from rifflux.index.frontmatter import split_front_matter
from rifflux.index.prepare import chunk_file
from rifflux.store import cjk

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "awesome-copilot"


def best_cpu(fn: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return round(best, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--rounds", type=int, default=3, help="best CPU time of N runs")
    args = parser.parse_args()
    defaults = Settings()
    bounds = {"max_chars": defaults.max_chunk_chars, "min_chars": defaults.min_chunk_chars}
    works = []
    for path in sorted(args.corpus.rglob("*.md")):
        data = path.read_bytes()
        text = decode_text(data)
        if text is not None:
            rel = path.relative_to(args.corpus).as_posix()
            works.append(FileWork(rel, 0, len(data), hashlib.sha256(data).hexdigest(), text))
    fronts = [split_front_matter(w.text, w.rel_path) for w in works]
    parts = [
        chunk_document(f.body, w.rel_path, title=f.title, **bounds)
        for w, f in zip(works, fronts, strict=True)
    ]
    contents = [[c.content for c in p] for p in parts]
    chunks = [c for p in parts for c in p]
    cpu = {
        "chunk_file (all of it)": best_cpu(
            lambda: [chunk_file(w, **bounds) for w in works], args.rounds
        ),
        "front matter": best_cpu(
            lambda: [split_front_matter(w.text, w.rel_path) for w in works], args.rounds
        ),
        "chunk_document": best_cpu(
            lambda: [
                chunk_document(f.body, w.rel_path, title=f.title, **bounds)
                for w, f in zip(works, fronts, strict=True)
            ],
            args.rounds,
        ),
        "kinds.classify": best_cpu(
            lambda: [
                kinds.classify(w.rel_path, f, c)
                for w, f, c in zip(works, fronts, contents, strict=True)
            ],
            args.rounds,
        ),
        "CJK check per chunk": best_cpu(
            lambda: [cjk.chunk_has_cjk(c.heading_path, c.content) for c in chunks], args.rounds
        ),
    }
    report = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "rifflux": str(Path(rifflux.__file__).parent),
        "corpus": str(args.corpus),
        "files": len(works),
        "chunks": len(chunks),
        "cpu_s": cpu,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
