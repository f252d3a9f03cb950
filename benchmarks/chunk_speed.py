"""CPU seconds to chunk a markdown corpus: the fast block scan against markdown-it.

Chunks every file of the corpus (awesome-copilot by default) with the shipped chunk bounds,
once through ``rifflux.index.blocks`` (the default) and once through markdown-it's token
stream, and reports CPU seconds (``time.process_time``, comparable on a shared machine)
for each, the time in the block scan or parse alone, and the files the scan handed back to
markdown-it. With ``--check`` it also asserts that both paths give identical chunks for
every file, at the shipped bounds and at small ones that split oversized blocks, and on a
sample of the generated scale corpus (``benchmarks/scale_corpus.py``).

    .venv/bin/python -m benchmarks.chunk_speed
    .venv/bin/python -m benchmarks.chunk_speed --check --scale-files 2000
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from benchmarks.harness import DEFAULT_CORPUS, emit, machine
from benchmarks.scale_corpus import Vocabulary, document
from rifflux.config import Settings
from rifflux.index import blocks, chunker

CHECK_LIMITS = ((300, 100), (80, 0))
T = TypeVar("T")


def cpu(fn: Callable[[], T], rounds: int) -> tuple[T, float]:
    """The result of ``fn`` and its best CPU time over ``rounds`` runs."""
    best = float("inf")
    result: T
    for _ in range(rounds):
        started = time.process_time()
        result = fn()
        best = min(best, time.process_time() - started)
    return result, best


def chunk_all(texts: list[tuple[str, str]], max_chars: int, min_chars: int, fast: bool) -> list:
    chunker.FAST_BLOCK_SCAN = fast
    try:
        return [
            chunker.chunk_document(text, path, max_chars=max_chars, min_chars=min_chars)
            for path, text in texts
        ]
    finally:
        chunker.FAST_BLOCK_SCAN = True


def scan_all(sources: list[str]) -> int:
    """Scan every source; returns how many fell back (``Unsure``)."""
    unsure = 0
    for src in sources:
        try:
            blocks.scan(src)
        except blocks.Unsure:
            unsure += 1
    return unsure


def parse_all(sources: list[str]) -> None:
    for src in sources:
        chunker._MD.parse(src)


def mismatches(texts: list[tuple[str, str]], limits: tuple[tuple[int, int], ...]) -> list[str]:
    bad = []
    for max_chars, min_chars in limits:
        fast = chunk_all(texts, max_chars, min_chars, fast=True)
        slow = chunk_all(texts, max_chars, min_chars, fast=False)
        bad += [
            f"{path} ({max_chars}/{min_chars})"
            for (path, _), a, b in zip(texts, fast, slow, strict=True)
            if a != b
        ]
    return bad


def scale_sample(files: int, seed: int = 13) -> list[tuple[str, str]]:
    vocab = Vocabulary.from_corpus(DEFAULT_CORPUS)
    rng = random.Random(seed)
    indexes = sorted(rng.sample(range(100_000), files))
    return [(f"doc-{i:06d}.md", document(vocab, random.Random(f"{seed}:{i}"))) for i in indexes]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--rounds", type=int, default=3, help="best CPU time of N runs")
    parser.add_argument("--check", action="store_true", help="assert identical chunks")
    parser.add_argument("--scale-files", type=int, default=1000, help="scale sample (--check)")
    args = parser.parse_args()

    settings = Settings.from_env()
    max_chars, min_chars = settings.max_chunk_chars, settings.min_chunk_chars
    paths = sorted(args.corpus.resolve().rglob("*.md"))
    texts = [(str(p), p.read_text(encoding="utf-8", errors="replace")) for p in paths]
    sources = [chunker.normalize_text(text) for _, text in texts]

    fast_chunks, fast_cpu = cpu(lambda: chunk_all(texts, max_chars, min_chars, True), args.rounds)
    slow_chunks, slow_cpu = cpu(lambda: chunk_all(texts, max_chars, min_chars, False), args.rounds)
    unsure, scan_cpu = cpu(lambda: scan_all(sources), args.rounds)
    _, parse_cpu = cpu(lambda: parse_all(sources), args.rounds)
    report: dict[str, object] = {
        "machine": machine(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "corpus": str(args.corpus),
        "files": len(texts),
        "megabytes": round(sum(len(t.encode()) for _, t in texts) / 1e6, 1),
        "chunk_bounds": [max_chars, min_chars],
        "chunks": sum(map(len, fast_chunks)),
        "cpu_s": {
            "chunk, markdown-it": round(slow_cpu, 3),
            "chunk, fast scan": round(fast_cpu, 3),
            "parse, markdown-it": round(parse_cpu, 3),
            "scan": round(scan_cpu, 3),
        },
        "speedup": {
            "chunk": round(slow_cpu / fast_cpu, 2),
            "parse vs scan": round(parse_cpu / scan_cpu, 2),
        },
        "files_fell_back": unsure,
        "fell_back_fraction": round(unsure / max(len(texts), 1), 4),
        "same_chunks_at_shipped_bounds": fast_chunks == slow_chunks,
    }
    failed = fast_chunks != slow_chunks
    if args.check:
        bad = mismatches(texts, CHECK_LIMITS)
        sample = scale_sample(args.scale_files)
        bad += mismatches(sample, ((max_chars, min_chars), *CHECK_LIMITS))
        report["check"] = {
            "corpus_limits": [list(limit) for limit in CHECK_LIMITS],
            "scale_sample_files": len(sample),
            "mismatches": bad[:20],
            "mismatch_count": len(bad),
        }
        failed = failed or bool(bad)
    emit("chunk_speed", **report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
