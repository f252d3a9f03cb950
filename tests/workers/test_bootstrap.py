"""A worker process's boot leaves out what it never uses (``workers.bootstrap``): rich,
which structlog would import, and OpenBLAS's threads; both stay available on demand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rifflux_testing import REPO_ROOT


def run_python(code: str, **env_vars: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
    env.pop("OPENBLAS_NUM_THREADS", None)
    env.update(PYTHONPATH=str(REPO_ROOT), **env_vars)
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def test_a_worker_boots_without_rich_and_an_actor_can_still_import_it() -> None:
    out = run_python(
        "import sys, workers.child\n"
        "print('rich' in sys.modules)\n"
        "import rich.console\n"
        "print(rich.console.Console.__name__)\n"
    )
    assert out.split() == ["False", "Console"]


def test_a_worker_logs_an_exception_as_a_json_line_with_its_traceback() -> None:
    out = run_python(
        "import sys, workers.child\n"
        "import structlog\n"
        "from rifflux.logs import configure_logging\n"
        "sys.stderr = sys.stdout\n"
        "configure_logging('INFO', style='json')\n"
        "try:\n"
        "    raise ValueError('boom')\n"
        "except ValueError:\n"
        "    structlog.get_logger('t').exception('job.failed', job_id='j1')\n"
    )
    line = json.loads(out.strip().splitlines()[-1])
    assert line["event"] == "job.failed"
    assert line["job_id"] == "j1"
    assert "Traceback" in line["exception"]
    assert "ValueError: boom" in line["exception"]


def threads_after_numpy(**env_vars: str) -> tuple[int, str]:
    out = run_python(
        "import os, workers.child, numpy\n"
        "status = open(f'/proc/{os.getpid()}/status').read()\n"
        "threads = [l for l in status.splitlines() if l.startswith('Threads:')][0]\n"
        "print(threads.split()[1], os.environ['OPENBLAS_NUM_THREADS'])\n",
        **env_vars,
    )
    threads, setting = out.split()
    return int(threads), setting


@pytest.mark.skipif(
    (os.cpu_count() or 1) < 2 or not Path("/proc/self/status").exists(),
    reason="OpenBLAS starts no thread on one core; needs Linux /proc",
)
def test_a_worker_starts_no_blas_threads_unless_the_environment_asks() -> None:
    assert threads_after_numpy() == (1, "1")
    threads, setting = threads_after_numpy(OPENBLAS_NUM_THREADS="2")
    assert (threads, setting) == (2, "2")


def test_the_arbiter_imports_structlog_with_its_first_log_line_and_without_rich() -> None:
    """The arbiter spawns its children before it pays for structlog (``workers.pool``):
    importing it loads neither; its first log line loads structlog, still without rich."""
    out = run_python(
        "import sys, workers.pool\n"
        "print('structlog' in sys.modules, 'numpy' in sys.modules)\n"
        "workers.pool.log.json_level = 'INFO'\n"
        "sys.stderr = sys.stdout\n"
        "workers.pool.log.info('pool.starting', processes=2)\n"
        "print('structlog' in sys.modules, 'rich' in sys.modules)\n"
    )
    lines = out.strip().splitlines()
    assert lines[0].split() == ["False", "False"]
    assert json.loads(lines[1])["event"] == "pool.starting"
    assert lines[2].split() == ["True", "False"]
