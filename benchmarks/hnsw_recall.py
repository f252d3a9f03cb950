"""HNSW recall@10 and latency against the exact scan at 200k / 1M rows of vectors with
real structure, and what the publisher's self-check says of them.

Rows:

* ``onnx``: the real ONNX vectors of an index (``--db``, e.g. a few thousand
  awesome-copilot chunks indexed with ``RIFFLUX_EMBEDDING_BACKEND=onnx``), each copied
  ``rows / base`` times with isotropic Gaussian noise: ``normalise(v + noise * g)``,
  ``g ~ N(0, I / dim)`` (``|g| ~ 1``), so a copy is at cosine ~``1/sqrt(1 + noise^2)``
  to its original and two copies of one original at ~``1/(1 + noise^2)``; copies of two
  originals at cosine c are at ~``c/(1 + noise^2)``. Noise only scales those gaps, while
  the random spread between copies grows with it, so small noise makes a query's
  nearest rows all copies of its own original (trivially found), and large noise
  drowns the real structure. The benchmark reports, per noise level, the share of the
  exact top 10 (self-check queries) that are copies of the query row's own original
  (``sibling_share``) and the real nearest-neighbour cosine of the originals, so the
  noise level can be judged.
* ``hash``: hash-embedder vectors (the default embedder without ONNX) of generated text
  (``benchmarks/scale_corpus.py`` paragraphs: real word frequencies, no meaning).

For each, one graph is built with the cache's builder (connectivity 16, expansion_add
128) and searched as the reader does (``ef`` candidates rescored exactly):
``self_check`` is :func:`rifflux.vectors.hnsw.measure_recall`, the publisher's own
check (100 of the rows as queries, fixed seed, query row excluded) and ``refused``
whether the publisher would refuse the graph; ``held_out`` is recall@10 of real queries
(``--queries``: the awesome-copilot query set, embedded with ONNX) against the exact
int8 scan, with the exact scan's and the graph's p50 / p95 search time (thread CPU
time: other jobs on a shared machine do not inflate it).

    nice -n 10 .venv/bin/python -m benchmarks.hnsw_recall --db /tmp/hnsw22/ac/index.db \\
        --queries benchmarks/awesome_copilot_queries.jsonl --rows 200000 --noise 0.5 1.0
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import emit, emit_machine
from benchmarks.scale_corpus import Vocabulary, paragraph
from rifflux.vectors.hnsw import (
    RECALL_FLOOR,
    build_graph,
    check_positions,
    measure_recall,
    open_graph,
    save_graph,
)
from rifflux.vectors.quantize import quantize_rows
from rifflux.vectors.scan import search_segments
from rifflux.vectors.segments import Segment, segment_meta

ONNX_MODEL = "onnx:all-MiniLM-L6-v2-int8"
SOURCE = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "awesome-copilot"
EFS = (50, 100, 200, 400)
BLOCK = 50_000
LIMIT = 20  # top_k 10 x the default candidate multiplier 2, as a search asks


def read_vectors(db: Path, model: str) -> np.ndarray:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT dim, vec FROM embeddings WHERE model = ? ORDER BY chunk_id", (model,)
        ).fetchall()
    finally:
        conn.close()
    if not rows:
        sys.exit(f"no {model} vectors in {db}")
    dim = int(rows[0][0])
    # float32 rows of older indexes, int8 rows (store/vector_blobs.py) of newer ones:
    # told apart by length; the direction is what counts here, not the scale.
    return np.stack(
        [
            np.frombuffer(
                blob, dtype=np.float32 if len(blob) == 4 * dim else np.int8, count=dim
            ).astype(np.float32)
            for _, blob in rows
        ]
    )


def unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def noisy_copies(
    base: np.ndarray, rows: int, noise: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """int8 rows: ``rows`` noisy copies of the unit ``base`` rows, and each row's original."""
    rng = np.random.default_rng(seed)
    origin = np.arange(rows) % base.shape[0]
    rng.shuffle(origin)
    out = np.empty((rows, base.shape[1]), dtype=np.int8)
    for start in range(0, rows, BLOCK):
        pick = origin[start : start + BLOCK]
        g = rng.standard_normal((pick.shape[0], base.shape[1])) / np.sqrt(base.shape[1])
        out[start : start + BLOCK] = quantize_rows(unit(base[pick] + noise * g))
    return out, origin


def hash_rows(rows: int, seed: int) -> np.ndarray:
    from rifflux.embed.hashing import HashEmbedder

    vocab = Vocabulary.from_corpus(SOURCE)
    embedder = HashEmbedder(384)
    out = np.empty((rows, 384), dtype=np.int8)
    for start in range(0, rows, BLOCK):
        texts = [
            paragraph(vocab, random.Random(seed * 1_000_003 + i))
            for i in range(start, min(rows, start + BLOCK))
        ]
        out[start : start + len(texts)] = quantize_rows(embedder.embed_batch(texts))
    return out


def nn_cosines(base: np.ndarray) -> dict[str, float]:
    """Cosine of each original with its nearest other original (quartiles)."""
    sims = base @ base.T
    np.fill_diagonal(sims, -1.0)
    best = sims.max(axis=1)
    q = np.percentile(best, [25, 50, 75])
    return {
        "p25": round(float(q[0]), 3),
        "p50": round(float(q[1]), 3),
        "p75": round(float(q[2]), 3),
    }


def sibling_share(vectors: np.ndarray, origin: np.ndarray) -> float:
    """Share of the exact top 10 of the self-check queries that are copies of the query
    row's own original (the query row itself excluded)."""
    positions = check_positions(vectors.shape[0])
    wide = vectors.astype(np.float32)
    wide /= np.linalg.norm(wide, axis=1, keepdims=True)
    same = 0
    for p in positions:
        scores = wide @ wide[p]
        scores[p] = -np.inf
        top = np.argpartition(-scores, 10)[:10]
        same += int(np.count_nonzero(origin[top] == origin[p]))
    return round(same / (10 * positions.shape[0]), 3)


def segment_of(vectors: np.ndarray, graph: object | None = None) -> Segment:
    n = vectors.shape[0]
    ids = np.arange(1, n + 1, dtype=np.int64)
    meta = segment_meta(ids, ids, np.arange(n), np.zeros(n, np.int64), vectors)
    paths = tuple(f"d{i:07d}.md" for i in range(n))
    return Segment(vectors, meta, paths, graph=graph)  # type: ignore[arg-type]


def held_out(vectors: np.ndarray, graph_path: Path, queries: np.ndarray) -> dict[str, object]:
    exact = segment_of(vectors)
    truth, exact_ms = [], []
    for q in queries:
        t = time.thread_time()
        truth.append(search_segments([exact], q, LIMIT)[:10])
        exact_ms.append(1000 * (time.thread_time() - t))
    out: dict[str, object] = {
        "queries": int(queries.shape[0]),
        "exact_p50_ms": round(statistics.median(exact_ms), 2),
        "exact_p95_ms": round(float(np.percentile(exact_ms, 95)), 2),
    }
    for ef in EFS:
        segment = segment_of(vectors, open_graph(graph_path, vectors.shape[0], ef))
        recalls, ms = [], []
        for q, best in zip(queries, truth, strict=True):
            t = time.thread_time()
            found = search_segments([segment], q, LIMIT)[:10]
            ms.append(1000 * (time.thread_time() - t))
            kth = best[-1].cosine
            recalls.append(sum(1 for h in found if h.cosine >= kth) / len(best))
        out[f"ef{ef}"] = {
            "recall_mean": round(float(np.mean(recalls)), 4),
            "recall_min": round(float(np.min(recalls)), 2),
            "p50_ms": round(statistics.median(ms), 2),
            "p95_ms": round(float(np.percentile(ms, 95)), 2),
        }
    return out


def measure(
    name: str, vectors: np.ndarray, queries: np.ndarray | None, workdir: Path
) -> dict[str, object]:
    started, cpu = time.perf_counter(), time.process_time()
    index = build_graph(vectors)
    build = {
        "wall_s": round(time.perf_counter() - started, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
    }
    result: dict[str, object] = {"rows": name, "build": build, "self_check": {}}
    checks: dict[str, float] = {}
    for ef in EFS:
        t = time.process_time()
        checks[f"ef{ef}"] = measure_recall(index, vectors, ef)
        checks[f"ef{ef}_cpu_s"] = round(time.process_time() - t, 2)
    result["self_check"] = checks
    result["refused"] = checks["ef200"] < RECALL_FLOOR
    if queries is not None:
        path = workdir / f"{name}.usearch"
        save_graph(index, path)
        del index
        result["held_out"] = held_out(vectors, path, queries)
        path.unlink()
    emit("hnsw_recall", **result)
    return result


def embed_queries(path: Path) -> np.ndarray:
    from rifflux.embed.onnx import OnnxEmbedder

    texts = [json.loads(line)["query"] for line in path.read_text().splitlines() if line.strip()]
    return OnnxEmbedder().embed_batch(texts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="an index with ONNX vectors (the originals)")
    parser.add_argument("--queries", type=Path, help="held-out queries (jsonl, 'query' key)")
    parser.add_argument("--rows", type=int, nargs="+", default=[200_000])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.5, 1.0])
    parser.add_argument("--hash-rows", type=int, default=200_000, help="0: skip")
    parser.add_argument("--seed", type=int, default=22)
    args = parser.parse_args()

    emit_machine(args={k: str(v) for k, v in vars(args).items()})
    queries = embed_queries(args.queries) if args.queries else None
    with tempfile.TemporaryDirectory(prefix="hnsw-recall-") as tmp:
        workdir = Path(tmp)
        if args.db:
            base = unit(read_vectors(args.db, ONNX_MODEL).astype(np.float64))
            emit("originals", rows=base.shape[0], nn_cosine=nn_cosines(base))
            real = quantize_rows(base)
            measure(f"onnx-{real.shape[0]}-real", real, queries, workdir)
            for rows in args.rows:
                for noise in args.noise:
                    vectors, origin = noisy_copies(base, rows, noise, args.seed)
                    emit(
                        "noisy_copies",
                        rows=rows,
                        noise=noise,
                        copy_cosine=round(1 / np.sqrt(1 + noise**2), 3),
                        sibling_share=sibling_share(vectors, origin),
                    )
                    measure(f"onnx-{rows}-noise{noise}", vectors, queries, workdir)
        if args.hash_rows:
            measure(f"hash-{args.hash_rows}", hash_rows(args.hash_rows, args.seed), None, workdir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
