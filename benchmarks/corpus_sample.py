"""The corpus sample the queue benchmarks index: the first N markdown files of a corpus."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def copy_files(source: Path, dest: Path, limit: int) -> int:
    """Copy the first ``limit`` markdown files of ``source`` (sorted) under ``dest``."""
    if not source.is_dir():
        sys.exit(f"corpus not found: {source} (benchmarks read ../shared beside the repo)")
    files = sorted(p for p in source.rglob("*.md") if p.is_file())[:limit]
    for path in files:
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return len(files)
