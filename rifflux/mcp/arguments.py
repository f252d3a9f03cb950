"""What the MCP tools share in their declarations: argument types (one schema per kind of
argument) and the read-only annotation."""

from __future__ import annotations

from typing import Annotated, Any

from mcp_types import ToolAnnotations
from pydantic import BeforeValidator, WithJsonSchema

from rifflux.search.request import MAX_MAX_TOKENS, MIN_MAX_TOKENS, as_integer

MaxTokens = Annotated[
    Any,
    BeforeValidator(as_integer),
    WithJsonSchema(
        {"type": ["integer", "null"], "minimum": MIN_MAX_TOKENS, "maximum": MAX_MAX_TOKENS}
    ),
]
"""A ``max_tokens`` argument: an integer budget or null (``"500"`` reads as 500); its range
is checked by the tool, whose message is the CLI's. Add ``Field(description=...)``."""

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
"""A tool that reads the index and nothing outside it."""
