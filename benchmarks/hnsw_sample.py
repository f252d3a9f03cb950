"""Does a graph of a sample of a segment's rows predict the recall of the segment's own
graph? The publisher checks a large segment on a sample before building its graph
(``rifflux.vectors.hnsw.sample_recall``); this measures the sample's recall at several
sample sizes, and optionally the whole graph's, on the rows of ``benchmarks.hnsw_recall``: hash
vectors of generated text, and noisy copies of real ONNX vectors (``--db``).

    nice -n 10 .venv/bin/python -m benchmarks.hnsw_sample --rows 200000 \\
        --db ONNX_INDEX.db --noise 1.0 2.0 [--whole]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import emit, emit_machine
from benchmarks.hnsw_recall import hash_rows, noisy_copies, read_vectors, unit
from rifflux.vectors.hnsw import build_graph, measure_recall

SAMPLES = (2_000, 5_000, 10_000, 20_000)


def sample_recall(vectors: np.ndarray, rows: int, seed: int = 7) -> tuple[float, float]:
    """Recall of a graph of ``rows`` of ``vectors`` (and its CPU seconds)."""
    rng = np.random.default_rng(seed)
    sample = np.ascontiguousarray(vectors[np.sort(rng.choice(vectors.shape[0], rows, False))])
    started = time.process_time()
    recall = measure_recall(build_graph(sample, threads=1), sample)
    return recall, time.process_time() - started


def report(name: str, vectors: np.ndarray, whole: bool) -> None:
    for rows in (n for n in SAMPLES if n < vectors.shape[0]):
        recall, cpu = sample_recall(vectors, rows)
        emit("sample_recall", vectors=name, rows=rows, recall=round(recall, 3), cpu_s=round(cpu, 1))
    if whole:
        started = time.process_time()
        recall = measure_recall(build_graph(vectors, threads=1), vectors)
        cpu = time.process_time() - started
        emit(
            "whole_recall",
            vectors=name,
            rows=vectors.shape[0],
            recall=round(recall, 3),
            cpu_s=round(cpu, 1),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--db", type=Path, help="an index with ONNX vectors (the originals)")
    parser.add_argument("--model", default="onnx:all-MiniLM-L6-v2-int8")
    parser.add_argument("--noise", type=float, nargs="*", default=[1.0, 2.0])
    parser.add_argument("--whole", action="store_true", help="also the whole graph (slow)")
    args = parser.parse_args()
    emit_machine(rows=args.rows, noise=args.noise)
    report("hash vectors of generated text", hash_rows(args.rows, 22), args.whole)
    if args.db:
        base = unit(read_vectors(args.db, args.model))
        for noise in args.noise:
            copies, _ = noisy_copies(base, args.rows, noise, 22)
            report(f"noisy ONNX copies, sigma {noise}", copies, args.whole)


if __name__ == "__main__":
    main()
