"""What one edited file's job costs when the corpus is large: the scan of the whole root.

The watcher (and auto-reindex on search) submits a job for its roots, not for the paths
that changed, so the job's plan stats every file under them: the part of one edit's
freshness that grows with the corpus. This generates ``--files`` one-chunk markdown
files (1,000 per folder) unless ``--workdir`` has them, indexes them in-process (hash
embedder), then ``--edits`` times rewrites one file and measures, in this process:

* the scan alone (``iter_scan`` over the root: every file stat-ed and glob-checked);
* the whole incremental in-process job (scan, plan, chunk, write, vector publish).

Wall and CPU seconds (``time.process_time``) of each, median over the edits.

    nice -n 5 .venv/bin/python benchmarks/edit_job_cost.py --files 100000 --workdir W
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.index.scan import iter_scan


def generate(root: Path, files: int) -> None:
    """``files`` small markdown files, 1,000 per folder (kept when already there)."""
    for i in range(files):
        folder = root / f"d{i // 1000:04d}"
        if i % 1000 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"f{i % 1000:04d}.md"
        if not path.exists():
            path.write_text(f"# Note {i}\n\nA short note numbered {i} about topic {i % 97}.\n")


def timed(fn) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--edits", type=int, default=5)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()

    root = args.workdir / "docs"
    generate(root, args.files)
    settings = Settings.from_env().with_overrides(
        db_path=args.workdir / "index.db", embedding_backend="hash"
    )
    indexer = Indexer(settings)
    started = time.perf_counter()
    report = indexer.run([root])
    print(f"machine: {platform.node()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(
        f"corpus: {args.files} files; first index: {report.files_indexed} files indexed in "
        f"{time.perf_counter() - started:.1f} s"
    )

    def scan() -> None:
        count = sum(
            1
            for _ in iter_scan(
                [root],
                base_dir=root.parent,
                include_globs=settings.include_globs,
                exclude_globs=settings.exclude_globs,
                skipped=[],
            )
        )
        assert count == args.files, count

    scans, jobs = [], []
    for edit in range(args.edits):
        target = root / "d0000" / f"f{edit:04d}.md"
        target.write_text(f"# Edited {edit}\n\nAn edited note, round {time.time()}.\n")
        scans.append(timed(scan))
        jobs.append(timed(lambda: indexer.run([root])))
    for name, runs in (("scan of the root", scans), ("one-edit job, in-process", jobs)):
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"{name}: median {wall:.3f} s wall, {cpu:.3f} s CPU over {len(runs)} edits")
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
