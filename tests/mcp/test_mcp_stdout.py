"""A stdio server's stdout carries JSON-RPC messages and nothing else, even while it logs."""

from __future__ import annotations

import json
import subprocess

from mcp.types import LATEST_PROTOCOL_VERSION
from mcp_support import server_command, tree_fixture  # noqa: F401

REQUESTS = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "0"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "search_rifflux", "arguments": {"query": "basil", "mode": "hybrid"}},
    },
    {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {"name": "get_chunk", "arguments": {"chunk_id": "no-such-chunk"}},
    },
]


def test_every_stdout_line_is_json_rpc_while_logs_go_to_stderr(tree) -> None:
    proc = subprocess.Popen(
        server_command("--transport", "stdio"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=tree.env(),
        cwd=tree.root,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for message in REQUESTS:
            proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        messages = []
        # Read until every request is answered; stdin stays open meanwhile.
        while {m.get("id") for m in messages} < {1, 2, 3, 4}:
            line = proc.stdout.readline()
            assert line, "server closed stdout before answering every request"
            messages.append(json.loads(line))  # any stray print would fail here
        proc.stdin.close()
        proc.wait(timeout=30)
        rest = proc.stdout.read()
        stderr = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    messages += [json.loads(line) for line in rest.splitlines() if line.strip()]
    assert all(m.get("jsonrpc") == "2.0" for m in messages)
    answered = {m["id"]: m for m in messages if "id" in m}
    assert answered[3]["result"]["isError"] is False
    assert answered[4]["result"]["isError"] is True
    assert '"event"' in stderr
