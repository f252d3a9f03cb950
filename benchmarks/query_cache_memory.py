"""Resident memory a front process gains from the query cache: 1,000 distinct top_k 100
searches on the vendored awesome-copilot corpus (hash embedder).

    .venv/bin/python -m benchmarks.query_cache_memory
    PYTHONPATH=<an older checkout> .venv/bin/python -m benchmarks.query_cache_memory

Indexes tests/corpus/awesome-copilot into a temporary directory, then, in a fresh child
process per cache setting (``python -c``, so ``PYTHONPATH`` picks the code measured), runs
one warm-up search, reads the process's RSS, runs ``--searches`` distinct hybrid searches
of ``top_k`` 100 through ``SearchService.search_response`` (the call the MCP tool and every
HTTP worker make) and reads the RSS again. ``cache_off`` is ``RIFFLUX_QUERY_CACHE_SIZE=0``:
the growth a process has without any cache. One JSON line per setting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import VENDORED_CORPUS as CORPUS
from benchmarks.harness import emit, machine

CHILD = """
import json, re, sys
from pathlib import Path
from rifflux.config import Settings
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService

def rss_kib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

corpus, db, searches = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
words = sorted({w.lower() for p in sorted(corpus.rglob("*.md"))
                for w in re.findall(r"[A-Za-z]{5,}", p.read_text(errors="replace"))})
settings = Settings.from_env().with_overrides(db_path=db, embedding_backend="hash",
                                              base_dir=corpus)
service = SearchService(settings)
service.search_response(SearchRequest("warm up the embedder and the vector cache"))
before = rss_kib()
sizes = []
for i in range(searches):
    query = f"{words[i % len(words)]} {words[(i * 7919 + 13) % len(words)]}"
    response = service.search_response(SearchRequest(query, top_k=100))
    sizes.append(response["count"])
after = rss_kib()
cache = service._query_cache
print(json.dumps({
    "rss_before_mib": round(before / 1024, 1),
    "rss_after_mib": round(after / 1024, 1),
    "growth_mib": round((after - before) / 1024, 1),
    "mean_results": round(sum(sizes) / len(sizes), 1),
    "cache_entries": len(cache),
    "cache_accounted_mib": round(getattr(cache, "bytes", 0) / 2**20, 1),
}))
"""


def measure(corpus: Path, db: Path, searches: int, env: dict[str, str]) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(corpus), str(db), str(searches)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        # Not the checkout's root: ``-c`` puts the working directory first on sys.path,
        # before PYTHONPATH.
        cwd=db.parent,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=1000)
    args = parser.parse_args()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "index" / "index.db"
        db.parent.mkdir()
        subprocess.run(
            [sys.executable, "-m", "rifflux.cli", "index", str(CORPUS), "--in-process"],
            check=True,
            capture_output=True,
            env={**base_env, "RIFFLUX_DB_PATH": str(db), "RIFFLUX_EMBEDDING_BACKEND": "hash"},
            cwd=db.parent,
        )
        settings = {"cache_default": {}, "cache_off": {"RIFFLUX_QUERY_CACHE_SIZE": "0"}}
        for name, extra in settings.items():
            result = measure(CORPUS, db, args.searches, {**base_env, **extra})
            line = {
                "setting": name,
                "code": os.environ.get("PYTHONPATH", "this checkout"),
                "machine": machine(),
                "searches": args.searches,
                **result,
            }
            emit("query_cache_memory", **line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
