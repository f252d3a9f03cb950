"""What a worker process settles before its first import: imported first, for its effect,
by the pool's arbiter (``python -m workers.pool``) and by each of its children
(``python -m workers.child``).

A local pool boots inside the call that needs it (a fresh MCP server's ``reindex``), so
every worker process's boot is on the path of that job. Two of its costs buy nothing in
a worker process, which renders JSON log lines and plain tracebacks (:mod:`rifflux.logs`)
and calls no BLAS routine (the int8 scans and norms are integer arithmetic numpy does
itself; ONNX Runtime has its own threads):

- **OpenBLAS threads.** numpy's OpenBLAS starts a thread per core when numpy is imported,
  and they spin while the import goes on: 53 ms of CPU in each process on 2 cores, more
  with more cores. :data:`BLAS_THREADS` is set to 1 unless the environment sets it.
- **structlog's rich.** structlog imports rich (with pygments and attrs), when it is
  installed, for its console renderer and pretty tracebacks: 38 ms of CPU per process.
  structlog is imported here with rich hidden, so it takes its plain paths; rich itself
  stays importable afterwards, for an actors module that wants it.

Measured with ``benchmarks/worker_boot.py``.
"""

from __future__ import annotations

import os
import sys

BLAS_THREADS = "OPENBLAS_NUM_THREADS"
"""The variable OpenBLAS reads, once, when numpy loads it."""


def _prepare() -> None:
    os.environ.setdefault(BLAS_THREADS, "1")
    if "structlog" in sys.modules or "rich" in sys.modules:
        return  # Too late, or rich is paid for already.
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]


_prepare()
