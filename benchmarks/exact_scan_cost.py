"""CPU cost of one exact semantic scan, float32 (before issue 14) against int8 (after).

Runs against whichever ``rifflux`` is importable, so the same script measures both:

    .venv/bin/python benchmarks/exact_scan_cost.py                     # this tree (int8)
    git archive main rifflux | tar -x -C /tmp/rifflux-main
    PYTHONPATH=/tmp/rifflux-main .venv/bin/python benchmarks/exact_scan_cost.py   # float32

Random unit rows (the scan's cost does not depend on their distribution) are written
with that version's segment writer, memory-mapped by its reader, and searched (limit 20)
by one thread. Reports the searching thread's CPU time per search (p50), which the other
jobs on a shared machine do not inflate, and wall time (p50), which they do.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 384
LIMIT = 20


def measure(rows: int, queries: int) -> dict[str, object]:
    from rifflux.vectors import segments
    from rifflux.vectors.cache import open_view

    rng = np.random.default_rng(0)
    floats = rng.standard_normal((rows, DIM)).astype(np.float32)
    floats /= np.linalg.norm(floats, axis=1, keepdims=True)
    int8 = hasattr(segments, "segment_meta")
    if int8:
        from rifflux.vectors.quantize import quantize_rows

        stored = quantize_rows(floats)
    else:
        stored = floats
    del floats
    ids = np.arange(rows, dtype=np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        paths = [f"d{i // 10:07d}.md" for i in range(rows)]
        ref = segments.write_segment(directory, 0, stored, ids, ids, paths, ids % 10)
        manifest = segments.Manifest("bench", 0, "synthetic:384", DIM, "bench", (ref,))
        segments.write_manifest(directory, manifest)
        del stored
        view = open_view(directory)
        assert view is not None
        qs = rng.standard_normal((queries + 3, DIM))
        for q in qs[:3]:
            view.search(q, LIMIT)
        wall, cpu = [], []
        for q in qs[3:]:
            t0, c0 = time.perf_counter(), time.thread_time()
            view.search(q, LIMIT)
            wall.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.thread_time() - c0) * 1000)
        vec_bytes = (directory / segments.segment_files(ref.id)[0]).stat().st_size
        meta_bytes = (directory / segments.segment_files(ref.id)[1]).stat().st_size
    return {
        "rows_dtype": "int8" if int8 else "float32",
        "rows": rows,
        "vec_bytes_per_row": round(vec_bytes / rows, 1),
        "meta_bytes_per_row": round(meta_bytes / rows, 1),
        "cpu_p50_ms": round(statistics.median(cpu), 2),
        "wall_p50_ms": round(statistics.median(wall), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[20_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    for rows in args.sizes:
        print(json.dumps(measure(rows, args.queries)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
