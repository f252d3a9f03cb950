"""CPU of the hash embedder on a corpus's chunk texts, in process.

Chunks every markdown file of ``--corpus`` (default awesome-copilot) as a job does
(``chunk_file`` with the settings table's chunk bounds), takes each distinct embedding
input once (as the chunk step does), and times ``HashEmbedder.embed_batch`` over all of
them ``--runs`` times, a fresh embedder each time (its word caches empty, as in a new
worker). Prints the texts, the best and median CPU seconds, and a digest of the vectors
(equal digests: bit-identical vectors, for before/after comparisons).

    .venv/bin/python -m benchmarks.hash_embed --runs 7
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

from benchmarks.harness import DEFAULT_CORPUS, emit, machine
from rifflux.config import Settings
from rifflux.embed.hashing import HashEmbedder
from rifflux.index.changes import FileWork, decode_text
from rifflux.index.prepare import chunk_file, embedding_input


def chunk_texts(corpus: Path) -> list[str]:
    """The distinct embedding inputs of the corpus's chunks, in path and chunk order."""
    settings = Settings.from_env({})
    texts: dict[str, str] = {}
    for path in sorted(corpus.rglob("*.md")):
        data = path.read_bytes()
        text = decode_text(data)
        if text is None:
            continue
        work = FileWork(
            path.relative_to(corpus).as_posix(),
            path.stat().st_mtime_ns,
            len(data),
            hashlib.sha256(data).hexdigest(),
            text,
        )
        prepared = chunk_file(
            work, max_chars=settings.max_chunk_chars, min_chars=settings.min_chunk_chars
        )
        for chunk in prepared.chunks:
            texts.setdefault(chunk.embed_sha256, embedding_input(chunk.heading_path, chunk.content))
    return list(texts.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    texts = chunk_texts(args.corpus)
    seconds = []
    digest = ""
    for _ in range(args.runs):
        embedder = HashEmbedder()
        started = time.process_time()
        vectors = embedder.embed_batch(texts)
        seconds.append(time.process_time() - started)
        digest = hashlib.sha256(vectors.tobytes()).hexdigest()
    emit(
        "hash_embed",
        machine=machine(),
        corpus=str(args.corpus),
        texts=len(texts),
        cpu_s_best=round(min(seconds), 3),
        cpu_s_median=round(statistics.median(seconds), 3),
        vectors_sha256=digest,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
