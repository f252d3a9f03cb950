"""A redis-server of the test's own, on a free port, that the test may kill and restart.

Chaos tests never touch the shared Redis on 127.0.0.1:6379: they start this one (no
persistence, so a restart loses every key, as a crashed cache-only Redis does).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rifflux_testing import free_port

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def redis_server_available() -> bool:
    return Path(REDIS_SERVER).is_file()


class PrivateRedis:
    """One redis-server process; ``start`` again after ``kill`` reuses the same port."""

    def __init__(self, workdir: Path, *, bind: tuple[str, ...] = ("127.0.0.1",)) -> None:
        self.workdir = workdir
        self.bind = bind
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def url(self, host: str = "127.0.0.1", db: int = 0, query: str = "") -> str:
        return f"redis://{host}:{self.port}/{db}" + (f"?{query}" if query else "")

    def start(self, timeout: float = 15.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / f"redis-{self.starts}.log").open("ab")
        self.starts += 1
        command = [REDIS_SERVER, "--port", str(self.port), "--bind", *self.bind]
        command += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
        if set(self.bind) - {"127.0.0.1", "::1"}:
            # The only other address is a veth end inside a namespace the test made.
            command += ["--protected-mode", "no"]
        command += ["--dir", str(self.workdir)]
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:
                    pass
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start; see {self.workdir}")
                time.sleep(0.05)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL the server (a crash); its data is gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)


@pytest.fixture(name="private_redis")
def private_redis_fixture(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A redis-server of the test's own, killed at teardown (tests import this fixture)."""
    if not redis_server_available():
        pytest.skip("redis-server is not installed; these tests need a private Redis")
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.kill()
