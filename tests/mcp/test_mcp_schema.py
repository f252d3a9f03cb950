"""The MCP tool schema of ``search_rifflux`` is derived from SearchRequest, and its
annotations say whether a search may start a reindex job."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp_support import IndexedTree, tree_fixture  # noqa: F401  (fixtures)
from mcp_types import Tool

from rifflux.config import Settings
from rifflux.mcp.server import build_server
from rifflux.mcp.tools import ToolContext
from rifflux.search.request import REQUIRED, request_fields


def listed_search_tool(settings: Settings, cwd: Path) -> Tool:
    context = ToolContext.from_settings(settings, cwd=cwd)
    try:
        listed = anyio.run(build_server(settings, context=context).list_tools)
    finally:
        context.close()
    return next(tool for tool in listed if tool.name == "search_rifflux")


def test_every_request_field_is_a_tool_argument_with_its_schema(tree: IndexedTree) -> None:
    schema = listed_search_tool(tree.settings(), tree.root).input_schema
    props = schema["properties"]

    fields = list(request_fields())
    assert list(props) == [name for name, _d, _s in fields] + ["db_path"]
    assert schema["required"] == [name for name, default, _s in fields if default is REQUIRED]
    for name, default, spec in fields:
        assert {k: props[name][k] for k in spec.json_schema} == dict(spec.json_schema)
        assert props[name]["description"] == spec.description
        if default is not REQUIRED:  # A null default is left out: not required says it.
            assert props[name].get("default") == default


@pytest.mark.parametrize("auto_reindex", [False, True])
def test_search_is_annotated_read_only_unless_it_may_start_reindex_jobs(
    tree: IndexedTree, auto_reindex: bool
) -> None:
    settings = tree.settings().with_overrides(auto_reindex_on_search=auto_reindex)

    annotations = listed_search_tool(settings, tree.root).annotations

    assert annotations is not None
    assert annotations.read_only_hint is (not auto_reindex)
    assert annotations.destructive_hint is (False if auto_reindex else None)
