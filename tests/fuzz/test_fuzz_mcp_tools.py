"""Fuzzing the MCP tools' argument validation through the real server, in process.

Any JSON-ish arguments to any tool give a result or a one-line tool error, and the
server keeps serving. The server's broker is unreachable, so a ``reindex`` that passes
validation fails fast at the broker (a one-line error too) instead of starting workers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fuzz_support import FUZZ
from hypothesis import example, given
from hypothesis import strategies as st
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))
from mcp_support import TOOL_NAMES, build_tree

from rifflux.mcp.server import build_server
from rifflux.mcp.tools import ToolContext

TOOLS = [*TOOL_NAMES, "no_such_tool"]
FIELDS = [
    "query",
    "top_k",
    "mode",
    "db_path",
    "path",
    "paths",
    "force",
    "prune_missing",
    "background",
    "chunk_id",
    "limit",
    "status",
    "decision_type",
    "kinds",
    "tags",
    "max_tokens",
    "extra",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            ".",
            "..",
            "/",
            "~",
            "~root/.ssh",
            "/etc/passwd",
            "docs",
            "docs/install.md",
            "docs/*.md",
            "**",
            "[",
            "decision",
            "\x00",
            "a" * 300,
            "lexical",
            "semantic",
            "hybrid",
            "../../etc",
            "/proc/self/environ",
            "index.db",
            ".rifflux/index.db",
            "file:///etc/passwd",
        ]
    ),
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
ARGUMENTS = st.dictionaries(
    st.one_of(st.sampled_from(FIELDS), st.text(max_size=10)), JSONISH, max_size=5
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BlockingPortal, Any]]:
    tree = build_tree(tmp_path_factory.mktemp("mcpfuzz") / "work")
    settings = tree.settings().with_overrides(broker_url="redis://127.0.0.1:1/0")
    context = ToolContext.from_settings(settings, cwd=tree.root)
    server = build_server(settings, context=context)
    try:
        with (
            start_blocking_portal() as portal,
            portal.wrap_async_context_manager(Client(server)) as client,
        ):
            yield portal, client
    finally:
        context.close()


def call(served: tuple[BlockingPortal, Any], tool: str, arguments: dict[str, Any]) -> Any:
    portal, client = served
    return portal.call(client.call_tool, tool, arguments)


@FUZZ
@given(st.sampled_from(TOOLS), ARGUMENTS)
# What the fuzzing found (BENCHMARKS.md): each was "internal error: OSError ...".
@example("reindex", {"path": "a" * 300})
@example("search_rifflux", {"query": "x", "db_path": "a" * 300})
@example("search_rifflux", {"query": "x", "db_path": "/dev/zero"})
def test_any_arguments_give_a_result_or_a_one_line_tool_error(
    served: tuple[BlockingPortal, Any], tool: str, arguments: dict[str, Any]
) -> None:
    result = call(served, tool, arguments)
    if result.is_error:
        text = result.content[0].text
        assert text and "\n" not in text and "Traceback" not in text, text
        assert not text.startswith("internal error"), text
    else:
        assert tool != "no_such_tool"
        assert isinstance(result.structured_content, dict)


def test_the_server_keeps_serving_after_the_fuzz(served: tuple[BlockingPortal, Any]) -> None:
    result = call(served, "search_rifflux", {"query": "basil tomatoes", "mode": "lexical"})
    assert not result.is_error
    assert result.structured_content["results"][0]["path"] == "notes/gardening.txt"
