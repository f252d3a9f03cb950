"""Peak RSS of each kind of Rifflux process at scale, each step in a fresh process.

    nice -n 10 .venv/bin/python -m benchmarks.scale_run --files 25000 --workdir /work/scale \
        --vector-index exact --keep
    nice -n 10 .venv/bin/python -m benchmarks.process_memory --workdir /work/scale --files 25000

On the corpus and index a ``benchmarks.scale_run --keep`` left in ``--workdir``, runs each step
alone in a child process (``python -c``, so ``PYTHONPATH`` picks the code measured: run it
again with ``PYTHONPATH=<an older checkout>`` for the before figures) and reports the
child's peak RSS (``ru_maxrss``), its anonymous and file-backed RSS at the end (mapped
cache files count in RSS as file pages: shared, and dropped under memory pressure) and
its wall time:

first_plan      the plan step of a first job over the whole corpus (a new, empty index):
                scan, diff, persist and send every batch (sent nowhere; texts read)
second_plan     the plan step of another job over the corpus, on a copy of the index
                (the steps below run on the same copy, in this order)
full_publish    ``publish(full=True)``: every vector row rewritten as one segment
front_search    a front process: a ``SearchService`` loading the cache, 20 queries x
                lexical, semantic, hybrid

``baseline`` is an interpreter that imported the same modules and did nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import emit, machine

PRELUDE = """
import json, resource, sys, time
from pathlib import Path
from rifflux.config import Settings
from rifflux.index import pipeline
from rifflux.index.messages import plan_request
from rifflux.queue.client import IndexQueue
from rifflux.search.service import SearchService
from rifflux.vectors.publish import publish
corpus, db, base = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
settings = Settings.from_env().with_overrides(
    db_path=db, embedding_backend="hash", base_dir=base, vector_index="exact"
)
started = time.perf_counter()
"""

STEPS = {
    "baseline": "pass",
    "plan": """
queue = IndexQueue(settings)
job_id = queue.submit([corpus])
queue.close()
sent = []
pipeline.plan(settings, plan_request(str(db), job_id), lambda c: sent.append(len(c.files)),
              lambda e: sent.append(len(e.paths)))
""",
    "full_publish": """
publish(db, source="bench", full=True, vector_index="exact")
""",
    "front_search": """
words = ["agent", "model", "python", "config", "test", "server", "deploy", "error",
         "token", "cache", "prompt", "file", "search", "index", "vector", "query",
         "workflow", "security", "review", "docs"]
queries = [" ".join(words[i : i + 3]) for i in range(20)]
service = SearchService(settings)
for mode in ("lexical", "semantic", "hybrid"):
    for q in queries:
        service.search(q, top_k=10, mode=mode)
service.close()
""",
}

EPILOGUE = """
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
kib = lambda key: round(int(status[key].split()[0]) / 1024)
print(json.dumps({"peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                  "end_rss_anon_mib": kib("RssAnon"), "end_rss_file_mib": kib("RssFile"),
                  "seconds": round(time.perf_counter() - started, 1)}))
"""


def run_step(step: str, corpus: Path, db: Path, base: Path) -> dict[str, float]:
    code = PRELUDE + STEPS[step] + EPILOGUE
    out = subprocess.run(
        [sys.executable, "-c", code, str(corpus), str(db), str(base)],
        capture_output=True,
        text=True,
        check=True,
        # Not the checkout's root: ``-c`` puts the working directory first on sys.path,
        # before PYTHONPATH.
        cwd=db.parent,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def copy_index(src: Path, dest_dir: Path) -> Path:
    """A copy of the index database (with its WAL) and its vector cache."""
    dest = dest_dir / src.name
    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dest}{suffix}")
    if Path(f"{src}.vectors").is_dir():
        shutil.copytree(f"{src}.vectors", f"{dest}.vectors")
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--files", type=int, default=25_000)
    parser.add_argument(
        "--steps", nargs="*", default=["first_plan", "second_plan", "full_publish", "front_search"]
    )
    args = parser.parse_args()
    corpus = args.workdir / f"corpus-{args.files}"
    index = args.workdir / f"index-{args.files}" / "index.db"
    report: dict[str, object] = {
        "machine": machine(),
        "code": os.environ.get("PYTHONPATH", "this checkout"),
        "files": args.files,
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        scratch = Path(tmp)
        report["baseline"] = run_step("baseline", corpus, scratch / "none.db", args.workdir)
        db: Path | None = None
        for step in args.steps:
            if step == "first_plan":
                fresh = scratch / "fresh"
                fresh.mkdir()
                report[step] = run_step("plan", corpus, fresh / "index.db", args.workdir)
                continue
            if db is None:
                (scratch / "copy").mkdir()
                db = copy_index(index, scratch / "copy")
            name = "plan" if step == "second_plan" else step
            report[step] = run_step(name, corpus, db, args.workdir)
    report["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    emit("process_memory", **report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
