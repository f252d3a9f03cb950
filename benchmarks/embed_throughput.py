"""Embedding throughput of the ONNX and hash embedders on a markdown corpus.

    python -m benchmarks.embed_throughput --limit 2000 --threads 2 --batch-size 32

Markdown files are split on blank lines into pieces of up to ~1,200 characters (close
to what the indexer's chunker produces), in sorted path order; the first ``--limit``
pieces are embedded in one call per backend, after a warm-up call that loads the model.
Prints the machine, the inputs and chunks/s and tokens/s.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import numpy as np
import onnxruntime

from benchmarks.harness import DEFAULT_CORPUS, emit, emit_machine
from rifflux.embed import HashEmbedder, OnnxEmbedder

CHUNK_CHARS = 1200
BACKENDS = ("onnx", "hash")


def split_markdown(text: str, max_chars: int = CHUNK_CHARS) -> list[str]:
    """Blank-line separated blocks packed into pieces of at most ``max_chars``
    (a longer block is cut into ``max_chars`` slices)."""
    pieces: list[str] = []
    current = ""
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if not block:
            continue
        if current and len(current) + 2 + len(block) > max_chars:
            pieces.append(current)
            current = ""
        while len(block) > max_chars:
            pieces.append(block[:max_chars])
            block = block[max_chars:]
        current = f"{current}\n\n{block}" if current else block
    if current:
        pieces.append(current)
    return pieces


def load_chunks(corpus: Path, limit: int) -> tuple[list[str], int]:
    """The first ``limit`` chunks of the corpus and how many files they came from."""
    chunks: list[str] = []
    files = 0
    for path in sorted(corpus.rglob("*.md")):
        if len(chunks) >= limit:
            break
        chunks.extend(split_markdown(path.read_text(encoding="utf-8", errors="replace")))
        files += 1
    return chunks[:limit], files


def timed(embed, chunks: list[str]) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    vectors = embed(chunks)
    return time.perf_counter() - start, vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--limit", type=int, default=2000, help="number of chunks")
    parser.add_argument("--threads", type=int, default=0, help="onnx intra-op threads (0: auto)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="onnx,hash")
    args = parser.parse_args()
    corpus = args.corpus.expanduser().resolve()
    if not corpus.is_dir():
        parser.error(f"corpus directory {corpus} does not exist; pass --corpus DIR")
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    if unknown := set(backends) - set(BACKENDS):
        parser.error(f"unknown backends {sorted(unknown)}: use onnx, hash or onnx,hash")

    chunks, files = load_chunks(corpus, args.limit)
    chars = sum(map(len, chunks))
    emit_machine(
        onnxruntime=onnxruntime.__version__,
        corpus=str(corpus),
        files=files,
        chunks=len(chunks),
        chars=chars,
        threads=args.threads,
        batch_size=args.batch_size,
    )

    if "onnx" in backends:
        onnx = OnnxEmbedder(threads=args.threads, batch_size=args.batch_size)
        load_seconds, _ = timed(onnx.embed_batch, ["warm-up"])
        tokens = sum(onnx.count_tokens(chunks))
        seconds, _ = timed(onnx.embed_batch, chunks)
        emit(
            "embed_throughput",
            model=onnx.label,
            load_s=round(load_seconds, 2),
            chunks=len(chunks),
            tokens=tokens,
            seconds=round(seconds, 1),
            chunks_per_s=round(len(chunks) / seconds, 1),
            tokens_per_s=round(tokens / seconds),
        )
    if "hash" in backends:
        hashing = HashEmbedder()
        seconds, _ = timed(hashing.embed_batch, chunks)
        emit(
            "embed_throughput",
            model=hashing.label,
            chunks=len(chunks),
            seconds=round(seconds, 2),
            chunks_per_s=round(len(chunks) / seconds),
        )


if __name__ == "__main__":
    main()
