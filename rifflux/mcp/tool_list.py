"""The ten tools as a client sees them, in one pattern: one typed function per tool,
whose signature and field descriptions are its input schema and whose docstring is its
description.

Each function asks the client for its roots when the tool reads or returns files, then
runs the tool's plain function (``tools.py``, ``knowledge_tools.py``, ``grep_tool.py``)
in a worker thread, so a blocking call never stalls the server. Values are checked by
those functions (for a search: by :class:`~rifflux.search.request.SearchRequest`), so a
client gets the CLI's messages; the types here only shape the schema and read loosely
typed values (``"10"`` → 10).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import unquote, urlsplit

import anyio
import structlog
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import ToolAnnotations
from pydantic import (
    BeforeValidator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    WithJsonSchema,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from rifflux.mcp import grep_tool, knowledge_tools, tools
from rifflux.mcp.tools import ToolContext
from rifflux.search.grep import DEFAULT_MAX_MATCHES, MAX_CONTEXT_LINES, MAX_MAX_MATCHES
from rifflux.search.request import (
    MAX_LIST_ITEMS,
    MAX_MAX_TOKENS,
    MAX_NEIGHBORS,
    MAX_QUERY_CHARS,
    MAX_TOP_K,
    MIN_MAX_TOKENS,
    FieldSpec,
    as_integer,
    request_fields,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
"""A tool that reads the index and nothing outside it."""
WRITES_INDEX = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
"""``reindex``: it changes the index (and nothing else), and doing it twice does no more."""


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run a blocking tool function in a worker thread so the server keeps serving.

    A cancelled call (the client cancelled it or went away) returns at once; its thread
    finishes on its own, and a reindex wait stops when the ToolContext closes.
    """
    return await anyio.to_thread.run_sync(
        functools.partial(fn, *args, **kwargs), abandon_on_cancel=True
    )


async def client_roots(context: Context[Any, Any] | None) -> list[Path] | None:
    """The file:// roots the client declares, or None when it declares none.

    A client that declares the capability but answers an empty list or fails to answer
    gets None too: the server's own allowed roots then apply (the outer bound anyway).
    """
    if context is None:
        return None
    capabilities = context.client_capabilities
    if capabilities is None or capabilities.roots is None:
        return None
    try:
        with warnings.catch_warnings():
            # Roots are deprecated in the 2026-07-28 protocol; clients still declare them.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            result = await context.session.list_roots()
    except Exception as exc:
        log.warning("mcp.list_roots_failed", error=str(exc))
        return None
    roots = []
    for root in result.roots:
        parts = urlsplit(str(root.uri))
        if parts.scheme == "file":
            roots.append(Path(unquote(parts.path)))
    return roots or None  # An empty list leaves the server's own roots in force.


@functools.cache
def _request_specs() -> dict[str, FieldSpec]:
    return {name: spec for name, _default, spec in request_fields()}


@dataclass(frozen=True, slots=True)
class SearchField:
    """Annotation of a ``search_rifflux`` argument: the schema, description and loose
    reading (``from_text``) of the SearchRequest field ``name``, its one definition,
    which the CLI's flags share."""

    name: str

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        spec = _request_specs()[self.name]
        return core_schema.no_info_before_validator_function(spec.from_text, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        spec = _request_specs()[self.name]
        return {**spec.json_schema, "description": spec.description}


LOOSE_INTEGER = BeforeValidator(as_integer)
"""Reads an integer argument given as text or a float with an integer value (``"5"``)."""


def integer_schema(minimum: int, maximum: int, *, nullable: bool = False) -> WithJsonSchema:
    """The schema of an integer argument in ``[minimum, maximum]`` (or null)."""
    kind: object = ["integer", "null"] if nullable else "integer"
    return WithJsonSchema({"type": kind, "minimum": minimum, "maximum": maximum})


BUDGET = integer_schema(MIN_MAX_TOKENS, MAX_MAX_TOKENS, nullable=True)
"""A ``max_tokens`` argument; its range is checked by the tool, whose message is the CLI's."""
COUNT = integer_schema(1, MAX_TOP_K, nullable=True)

MaxTokens = Annotated[
    Any,
    LOOSE_INTEGER,
    BUDGET,
    Field(description="Token budget of the whole answer (default: the server's limit)."),
]
Count = Annotated[Any, LOOSE_INTEGER, COUNT, Field(description="How many results (default 10).")]
SameAsLimit = Annotated[Any, LOOSE_INTEGER, COUNT, Field(description="Same as limit.")]
Query = Annotated[
    str,
    WithJsonSchema({"type": "string", "maxLength": MAX_QUERY_CHARS}),
    Field(
        description="What to look for: words, a question, an error line "
        f"(at most {MAX_QUERY_CHARS} characters)."
    ),
]
Globs = WithJsonSchema(
    {"type": ["string", "array"], "items": {"type": "string"}, "maxItems": MAX_LIST_ITEMS}
)


def register_tools(server: MCPServer, ctx: ToolContext) -> None:
    """Add the ten tools over ``ctx`` to ``server``, in the order clients list them."""
    search = READ_ONLY if ctx.auto_reindex is None else WRITES_INDEX

    # search_rifflux is read-only unless RIFFLUX_AUTO_REINDEX_ON_SEARCH makes a search
    # submit reindex jobs: then it says so, with reindex's hints (docs/mcp.md).
    @server.tool(annotations=search)
    async def search_rifflux(
        query: Annotated[str, SearchField("query")],
        top_k: Annotated[Any, SearchField("top_k")] = 10,
        mode: Annotated[Any, SearchField("mode")] = "hybrid",
        fusion: Annotated[Any, SearchField("fusion")] = None,
        alpha: Annotated[Any, SearchField("alpha")] = None,
        candidate_k: Annotated[Any, SearchField("candidate_k")] = None,
        group_by: Annotated[Any, SearchField("group_by")] = "chunk",
        lexical_weight: Annotated[Any, SearchField("lexical_weight")] = None,
        semantic_weight: Annotated[Any, SearchField("semantic_weight")] = None,
        min_cosine: Annotated[Any, SearchField("min_cosine")] = None,
        path_glob: Annotated[Any, SearchField("path_glob")] = None,
        modified_after: Annotated[Any, SearchField("modified_after")] = None,
        modified_before: Annotated[Any, SearchField("modified_before")] = None,
        file_types: Annotated[Any, SearchField("file_types")] = None,
        content_contains: Annotated[str | None, SearchField("content_contains")] = None,
        kinds: Annotated[Any, SearchField("kinds")] = None,
        tags: Annotated[Any, SearchField("tags")] = None,
        status: Annotated[str | None, SearchField("status")] = None,
        max_tokens: Annotated[Any, SearchField("max_tokens")] = None,
        db_path: Annotated[
            str | None,
            Field(
                description="Another Rifflux index database to search instead of the server's own."
            ),
        ] = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Search the indexed notes and docs; use it first for any question about them,
        then read hits whole with get_chunk or get_file.

        Choose group_by "file" when you want files (nDCG 0.948 against 0.905), mode
        "lexical" for identifiers and error codes, fusion "minmax" with alpha 0.5 for
        natural-language questions.

        A trimmed answer has a budget; embedding_coverage and a warning mean some
        chunks have no vectors yet.
        """
        return await in_thread(
            tools.search_rifflux,
            ctx,
            query,
            db_path,
            await client_roots(context),
            top_k=top_k,
            mode=mode,
            fusion=fusion,
            alpha=alpha,
            candidate_k=candidate_k,
            group_by=group_by,
            lexical_weight=lexical_weight,
            semantic_weight=semantic_weight,
            min_cosine=min_cosine,
            path_glob=path_glob,
            modified_after=modified_after,
            modified_before=modified_before,
            file_types=file_types,
            content_contains=content_contains,
            kinds=kinds,
            tags=tags,
            status=status,
            max_tokens=max_tokens,
        )

    @server.tool(annotations=WRITES_INDEX)
    async def reindex(
        path: Annotated[str | None, Field(description="A file or directory to index.")] = None,
        paths: Annotated[
            list[str] | None,
            Field(
                description="Several, in one job (default: path, else the server's "
                "working directory)."
            ),
        ] = None,
        force: Annotated[
            bool, Field(description="Re-chunk and re-embed unchanged files too.")
        ] = False,
        prune_missing: Annotated[
            bool, Field(description="Drop files under these paths that no longer exist.")
        ] = True,
        background: Annotated[
            bool,
            Field(description="Return {job_id, status} at once; follow it with index_status."),
        ] = False,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Index new or changed files so searches find them: after files were added,
        edited or deleted, or when a search misses a file. Waits for the job unless
        background is true."""
        roots = await client_roots(context)
        return await in_thread(
            tools.reindex, ctx, path, paths, force, prune_missing, background, roots
        )

    @server.tool(annotations=READ_ONLY)
    async def index_status() -> dict[str, Any]:
        """Index counts, workers, queues, recent jobs and the file watcher: use it to
        follow a background reindex or when results look incomplete."""
        return await in_thread(tools.index_status, ctx)

    @server.tool(annotations=READ_ONLY)
    async def get_chunk(
        chunk_id: Annotated[str, Field(description="A chunk_id from search results.")],
        neighbors: Annotated[
            Any,
            LOOSE_INTEGER,
            integer_schema(0, MAX_NEIGHBORS),
            Field(description="Also return up to this many chunks before and after it (0-5)."),
        ] = 0,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Read one search hit in full by its chunk_id, with neighbouring chunks for
        context: {chunk, before, after}."""
        roots = await client_roots(context)
        return await in_thread(tools.get_chunk, ctx, chunk_id, roots, neighbors)

    @server.tool(annotations=READ_ONLY)
    async def get_file(
        path: Annotated[
            str,
            Field(description="Its path as search results show it, or absolute."),
        ],
        heading: Annotated[
            str | None,
            Field(
                description="Only this section: a heading path such as 'Guide > Install', "
                "or a unique suffix ('install')."
            ),
        ] = None,
        max_tokens: Annotated[
            Any,
            LOOSE_INTEGER,
            BUDGET,
            Field(
                description="Token budget of the whole answer (default: the server's "
                "limit); chunks in order, the last one cut."
            ),
        ] = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Read an indexed file, or one section of it, by its path: when a hit's file is
        worth reading whole. Returns {file: {path, sha256, chunks}}."""
        roots = await client_roots(context)
        return await in_thread(tools.get_file, ctx, path, roots, heading, max_tokens)

    @server.tool(annotations=READ_ONLY)
    async def search_decisions(
        query: Query,
        limit: Count = None,
        decision_type: Annotated[
            str | None, Field(description="Only decisions of this decision_type.")
        ] = None,
        status: Annotated[
            str | None,
            Field(description="Only decisions with this status (accepted, proposed...)."),
        ] = None,
        max_tokens: MaxTokens = None,
        top_k: SameAsLimit = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Search only the decision records (ADRs): for why something was chosen or what
        was decided, with each decision's status and text."""
        roots = await client_roots(context)
        return await in_thread(
            knowledge_tools.search_decisions,
            ctx,
            query,
            limit,
            decision_type,
            status,
            max_tokens,
            top_k,
            roots,
        )

    @server.tool(annotations=READ_ONLY)
    async def search_errors(
        query: Query,
        limit: Count = None,
        max_tokens: MaxTokens = None,
        top_k: SameAsLimit = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Search only the error-fix pairs of troubleshooting pages: give an error
        message or code to find its known fix."""
        roots = await client_roots(context)
        return await in_thread(
            knowledge_tools.search_errors, ctx, query, limit, max_tokens, top_k, roots
        )

    @server.tool(annotations=READ_ONLY)
    async def context_stats() -> dict[str, Any]:
        """What the index holds (decision records by status, error pairs, tags,
        embedding coverage): use it to choose between the searches."""
        return await in_thread(knowledge_tools.context_stats, ctx)

    @server.tool(annotations=READ_ONLY)
    async def multi_get(
        paths: Annotated[
            Any,
            WithJsonSchema(
                {"type": "array", "items": {"type": "string"}, "maxItems": MAX_LIST_ITEMS}
            ),
            Field(
                description="Paths as search results show them or absolute, or globs "
                "(docs/adr/*.md); answered in this order."
            ),
        ],
        max_tokens: Annotated[
            Any,
            LOOSE_INTEGER,
            BUDGET,
            Field(
                description="Token budget of the whole answer (default: the server's "
                "limit); files in order, the rest in not_included."
            ),
        ] = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Read several indexed files at once, by path or glob (docs/adr/*.md), instead
        of repeated get_file calls: {files, not_included, count}."""
        roots = await client_roots(context)
        return await in_thread(knowledge_tools.multi_get, ctx, paths, max_tokens, roots)

    @server.tool(annotations=READ_ONLY)
    async def grep_rifflux(
        pattern: Annotated[
            str,
            Field(description="Text to find; with regex, an RE2 regex: retry_(count|limit)\\s*=."),
        ],
        regex: Annotated[bool, Field(description="Read pattern as a regex.")] = False,
        case_sensitive: Annotated[bool, Field(description="Match case exactly.")] = False,
        path_glob: Annotated[
            Any,
            Globs,
            Field(description="Only files whose path matches this glob (or any of these)."),
        ] = None,
        context_lines: Annotated[
            Any,
            LOOSE_INTEGER,
            integer_schema(0, MAX_CONTEXT_LINES),
            Field(description="Lines of context around each match."),
        ] = 0,
        max_matches: Annotated[
            Any,
            LOOSE_INTEGER,
            integer_schema(1, MAX_MAX_MATCHES),
            Field(description="Most matching lines returned."),
        ] = DEFAULT_MAX_MATCHES,
        max_tokens: Annotated[
            Any,
            LOOSE_INTEGER,
            BUDGET,
            Field(description="Token budget of the whole answer (default: the server's limit)."),
        ] = None,
        context: Context[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """Find every line holding an exact string or a regex, as grep does, from the
        index. Use it for identifiers, error strings, config keys and partial words
        (CONNECTION_REF, foo_bar(, v2.3.0); search_rifflux for questions and topics.

        Matches in path and line order: line and column (1-based, in the file), text,
        before/after, chunk_id, heading_path. truncated: more lines match; scanned: no
        3-character literal, so every file was read.
        """
        roots = await client_roots(context)
        return await in_thread(
            grep_tool.grep_rifflux,
            ctx,
            pattern,
            roots,
            regex=regex,
            case_sensitive=case_sensitive,
            path_glob=path_glob,
            context_lines=context_lines,
            max_matches=max_matches,
            max_tokens=max_tokens,
        )
