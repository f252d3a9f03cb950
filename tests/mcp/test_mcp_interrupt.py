"""Ctrl-C stops ``rifflux serve`` started on a terminal, over stdio and over HTTP.

The server runs with a pseudo-terminal as its stdin, stdout and stderr, in its own
process group; Ctrl-C is what a terminal sends its foreground process group: SIGINT.
Over stdio nobody types a line, so the server's read of stdin never returns by itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from http_support import INITIALIZE, free_port, wait_until_listening
from mcp_support import IndexedTree, server_command, tree_fixture  # noqa: F401  (fixture)
from rifflux_testing import wait_until

# Generous: the bound only ends a test whose server does not stop.
STOP_TIMEOUT_S = 60.0

# Runs the command with SIGINT at its default, as a shell starts a foreground command.
# A test process may itself ignore SIGINT (started in the background by a shell without
# job control, as CI may be), and an ignored signal stays ignored across exec: Python
# then installs no Ctrl-C handler, and nothing here would test what a terminal does.
AS_FROM_A_SHELL = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])",
]


def on_a_terminal(tree: IndexedTree, *args: str, **env: str) -> tuple[subprocess.Popen[bytes], int]:
    """``rifflux serve ARGS`` with a pseudo-terminal for stdin, stdout and stderr; also
    returns the terminal's other end (the caller closes it)."""
    controller, terminal = os.openpty()
    try:
        proc = subprocess.Popen(
            [*AS_FROM_A_SHELL, *server_command(*args)],
            env=tree.env(**env),
            cwd=tree.root,
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            start_new_session=True,
        )
    finally:
        os.close(terminal)
    os.set_blocking(controller, False)
    return proc, controller


def read_terminal(controller: int, seen: bytearray) -> bytes:
    """What the server wrote to its terminal so far (the reads keep it from filling)."""
    try:
        while chunk := os.read(controller, 65536):
            seen += chunk
    except (BlockingIOError, OSError):
        pass
    return bytes(seen)


def interrupt_and_wait(proc: subprocess.Popen[bytes], controller: int, seen: bytearray) -> int:
    os.killpg(proc.pid, signal.SIGINT)
    try:
        wait_until(
            lambda: read_terminal(controller, seen) is not None and proc.poll() is not None,
            timeout=STOP_TIMEOUT_S,
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    read_terminal(controller, seen)
    return proc.returncode


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_stops_an_http_server_on_a_terminal(tree: IndexedTree, workers: str) -> None:
    port = free_port()
    proc, controller = on_a_terminal(
        tree, "--transport", "http", "--port", str(port), RIFFLUX_HTTP_WORKERS=workers
    )
    seen = bytearray()
    try:
        wait_until_listening(proc, port)
        code = interrupt_and_wait(proc, controller, seen)
    finally:
        os.close(controller)
    assert code == 130, seen.decode(errors="replace")[-3000:]
    assert b"Traceback" not in seen, seen.decode(errors="replace")[-3000:]


def test_ctrl_c_stops_a_stdio_server_waiting_for_a_line_on_a_terminal(
    tree: IndexedTree,
) -> None:
    proc, controller = on_a_terminal(tree)
    seen = bytearray()
    try:
        # Typed on the terminal: the answer shows the server is serving, and waiting for
        # the next line.
        os.write(controller, json.dumps(INITIALIZE).encode() + b"\n")
        wait_until(lambda: b'"serverInfo"' in read_terminal(controller, seen))
        code = interrupt_and_wait(proc, controller, seen)
    finally:
        os.close(controller)
    assert code == 130, seen.decode(errors="replace")[-3000:]
    assert b"Traceback" not in seen, seen.decode(errors="replace")[-3000:]
    assert not Path(f"/proc/{proc.pid}").exists()
