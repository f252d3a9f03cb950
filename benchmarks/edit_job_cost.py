"""What one edited file's job costs when the corpus is large: the scan of the whole root.

The watcher (and auto-reindex on search) submits a job for its roots, not for the paths
that changed, so the job's plan stats every file under them: the part of one edit's
freshness that grows with the corpus. This generates ``--files`` one-chunk markdown
files (1,000 per folder) unless ``--workdir`` has them, indexes them in-process (hash
embedder), then ``--edits`` times rewrites one file and measures, in this process:

* the scan alone (``iter_scan`` over the root: every file stat-ed and glob-checked);
* the whole incremental in-process job (scan, plan, chunk, write, vector publish);
* the queued job as the watcher submits it, every step run in this process (plan,
  chunk with the inline hash vectors, finalize with the vector publish), once for the
  whole root (what the watcher submitted before) and once scoped to the edited file
  (what it submits now), each step timed.

Wall and CPU seconds (``time.process_time``) of each, median over the edits.

    nice -n 5 .venv/bin/python -m benchmarks.edit_job_cost --files 100000 --workdir W
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchmarks.harness import emit, emit_machine
from rifflux.config import Settings
from rifflux.embed.hashing import HashEmbedder
from rifflux.index import pipeline
from rifflux.index.indexer import Indexer
from rifflux.index.messages import finalize_request, plan_request
from rifflux.index.scan import iter_scan
from rifflux.queue.client import IndexQueue
from rifflux.store.connection import open_index


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


def queued_job(settings: Settings, root: Path, scope: list[Path] | None) -> dict[str, float]:
    """One job submitted as the watcher submits it, its steps run here; CPU per step."""
    db = str(settings.db_path)
    cpu: dict[str, float] = {}

    def step(name: str, fn) -> None:  # type: ignore[no-untyped-def]
        started = time.process_time()
        fn()
        cpu[name] = cpu.get(name, 0.0) + time.process_time() - started

    queue = IndexQueue(settings)
    job_id = queue.submit([root], scope=scope)
    queue.close()
    chunks: list = []
    step("plan", lambda: pipeline.plan(settings, plan_request(db, job_id), chunks.append, print))
    embedder = HashEmbedder()
    for request in chunks:
        step("chunk", lambda r=request: pipeline.chunk(r, embedder))
    step("finalize", lambda: pipeline.finalize(finalize_request(db, job_id)))
    record = pipeline.finalize(finalize_request(db, job_id))
    assert record is not None and record.state == "completed", record
    cpu["files scanned"] = record.files_total
    return cpu


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
    emit_machine(files=args.files, edits=args.edits)
    emit(
        "first_index",
        files_indexed=report.files_indexed,
        seconds=round(time.perf_counter() - started, 2),
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
    for name, runs in (("root_scan", scans), ("edit_job_in_process", jobs)):
        emit(
            name,
            files=args.files,
            wall_s_median=round(statistics.median(w for w, _ in runs), 3),
            cpu_s_median=round(statistics.median(c for _, c in runs), 3),
            edits=len(runs),
        )

    # The queued jobs. A connection stays open, as the front process's keeps one (the
    # last connection to close checkpoints the whole WAL, which a real job never does).
    keep_open = open_index(settings.db_path)
    queued_job(settings, root, None)  # records the root's whole scan (no symlinks)
    for label, scoped in (("whole_root", False), ("scoped_to_the_edited_file", True)):
        runs = []
        for edit in range(args.edits):
            target = root / "d0001" / f"f{edit:04d}.md"
            target.write_text(f"# Queued {edit}\n\nA queued edit, {label}, {time.time()}.\n")
            wall = time.perf_counter()
            cpu = queued_job(settings, root, [target] if scoped else None)
            cpu["wall"] = time.perf_counter() - wall
            runs.append(cpu)
        medians = {
            f"{key}_s": round(statistics.median(r.get(key, 0.0) for r in runs), 3)
            for key in ("plan", "chunk", "finalize", "wall")
        }
        total = statistics.median(r["plan"] + r.get("chunk", 0.0) + r["finalize"] for r in runs)
        emit(
            "edit_job_queued",
            job=label,
            files=args.files,
            cpu_steps_s_median=round(total, 3),
            medians=medians,
            files_scanned=int(runs[0]["files scanned"]),
        )
    keep_open.close()


if __name__ == "__main__":
    main()
