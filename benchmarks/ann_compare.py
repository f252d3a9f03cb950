"""usearch (int8) against hnswlib (float32) on clustered synthetic vectors: the
comparison behind the choice of HNSW library for the vector cache (issue 14).

Rows are drawn around a few thousand centroids (as embeddings of real documents are,
not uniform noise), quantized to int8 the way the cache stores them. Both libraries get
the same graph settings (M / connectivity 16, ef_construction / expansion_add 128,
ef / expansion_search 50) and 2 build threads. Recall@10 is measured two ways against the
exact int8 cosine top 10: of the library's own top 10 ("raw") and of its top 50
rescored exactly (what the cache does). Each library runs in a fresh process, so RSS
is its own.

    nice -n 10 .venv/bin/python benchmarks/ann_compare.py --rows 100000
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vector_search import clustered, machine, proc_status

from rifflux.vectors.quantize import exact_cosines, quantize_query, squared_norms

DIM = 384
FETCH = 50
TOP = 10
M = 16
EF_CONSTRUCTION = 128
EF = 50


def exact_top(matrix: np.ndarray, sq: np.ndarray, q8: np.ndarray, k: int) -> np.ndarray:
    scores = exact_cosines(matrix, sq, q8)
    return np.lexsort((np.arange(scores.shape[0]), -scores))[:k]


def run(library: str, rows: int, queries: int, seed: int) -> dict[str, object]:
    matrix, qs = clustered(rows, queries, seed)
    sq = squared_norms(matrix)
    rss_before = proc_status()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "index.bin"
        if library == "usearch":
            from usearch.index import Index

            index = Index(
                ndim=DIM,
                metric="cos",
                dtype="i8",
                connectivity=M,
                expansion_add=EF_CONSTRUCTION,
                expansion_search=EF,
            )
            index.add(np.arange(rows, dtype=np.uint64), matrix, threads=2)
            build_s = time.perf_counter() - t0
            index.save(str(path))
            size = path.stat().st_size
            del index
            index = Index.restore(str(path), view=True)
            index.expansion_search = EF

            def search(q: np.ndarray) -> np.ndarray:
                return np.asarray(index.search(quantize_query(q), FETCH).keys, dtype=np.int64)
        else:
            import hnswlib

            index = hnswlib.Index(space="cosine", dim=DIM)
            index.init_index(max_elements=rows, ef_construction=EF_CONSTRUCTION, M=M)
            index.set_num_threads(2)
            index.add_items(matrix.astype(np.float32), np.arange(rows))
            build_s = time.perf_counter() - t0
            index.save_index(str(path))
            size = path.stat().st_size
            index.set_num_threads(1)
            index.set_ef(EF)

            def search(q: np.ndarray) -> np.ndarray:
                q32 = quantize_query(q).astype(np.float32)
                return np.asarray(index.knn_query(q32, FETCH)[0][0], dtype=np.int64)

        rss_built = proc_status()
        timings, raw, rescored = [], [], []
        for q in qs:
            q8 = quantize_query(q)
            truth = set(exact_top(matrix, sq, q8, TOP).tolist())
            t1 = time.perf_counter()
            found = search(q)
            timings.append((time.perf_counter() - t1) * 1000)
            raw.append(len(truth & set(found[:TOP].tolist())) / TOP)
            best = found[exact_top(matrix[found], sq[found], q8, TOP)]
            rescored.append(len(truth & set(best.tolist())) / TOP)
    return {
        "library": library,
        "rows": rows,
        "build_s": round(build_s, 1),
        "file_mib": round(size / 2**20, 1),
        "search_p50_ms": round(statistics.median(timings), 3),
        "recall_at_10_raw": round(float(np.mean(raw)), 4),
        "recall_at_10_rescored": round(float(np.mean(rescored)), 4),
        "rss_before": rss_before,
        "rss_after": rss_built,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--library", choices=["usearch", "hnswlib"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.library:
        print(json.dumps(run(args.library, args.rows, args.queries, args.seed)))
        return 0
    report: dict[str, object] = {"machine": machine(), "results": []}
    for library in ("usearch", "hnswlib"):
        command = [sys.executable, __file__, "--library", library, "--rows", str(args.rows)]
        command += ["--queries", str(args.queries), "--seed", str(args.seed)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        print(json.dumps(result), file=sys.stderr)
        report["results"].append(result)  # type: ignore[attr-defined]
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
