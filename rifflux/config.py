"""Typed settings, read once from ``RIFFLUX_*`` environment variables.

Every tunable lives here with its default. The original Rifflux spelled the prefix
``RIFLUX_`` in some releases; those names are still read as a fallback so existing
MCP host configurations keep working.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from rifflux.errors import ConfigError

PREFIX = "RIFFLUX_"
LEGACY_PREFIX = "RIFLUX_"

DEFAULT_DB_PATH = Path(".rifflux") / "index.db"
DEFAULT_INCLUDE_GLOBS = ("*.md", "*.markdown", "*.mdx", "*.txt")
DEFAULT_EXCLUDE_GLOBS = (".git", ".venv", "node_modules", "__pycache__", ".rifflux")
EMBEDDING_BACKENDS = ("auto", "onnx", "hash")
# Hybrid fusions: reciprocal rank fusion, or a weighted sum of min-max or max-scaled scores.
FUSIONS = ("rrf", "minmax", "maxnorm")
VECTOR_INDEXES = ("auto", "exact", "hnsw")

MAX_PORT = 65535

T = TypeVar("T")


def _parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError("expected one of 1/0, true/false, yes/no, on/off")


def _parse_list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _parse_backend(raw: str) -> str:
    value = raw.strip().lower()
    if value not in EMBEDDING_BACKENDS:
        raise ValueError(f"expected one of {', '.join(EMBEDDING_BACKENDS)}")
    return value


def _parse_fusion(raw: str) -> str:
    value = raw.strip().lower()
    if value not in FUSIONS:
        raise ValueError(f"expected one of {', '.join(FUSIONS)}")
    return value


def _parse_vector_index(raw: str) -> str:
    value = raw.strip().lower()
    if value not in VECTOR_INDEXES:
        raise ValueError(f"expected one of {', '.join(VECTOR_INDEXES)}")
    return value


def _unit_float(raw: str) -> float:
    value = float(raw)
    if not 0.0 <= value <= 1.0:
        raise ValueError("expected a number from 0 to 1")
    return value


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; ``os.process_cpu_count`` from
    Python 3.13), at least 1."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # Not on Linux.
        return os.cpu_count() or 1


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError("expected an integer >= 1")
    return value


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("expected an integer >= 0")
    return value


MAX_RESPONSE_TOKENS_RANGE = (50, 100_000)
"""What RIFFLUX_MAX_RESPONSE_TOKENS accepts besides 0 (off): ``max_tokens``' own range."""


def _response_tokens(raw: str) -> int:
    value = int(raw)
    low, high = MAX_RESPONSE_TOKENS_RANGE
    if value != 0 and not low <= value <= high:
        raise ValueError(f"expected 0 (no limit) or an integer from {low} to {high}")
    return value


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError("expected a number > 0")
    return value


def _positive_seconds(raw: str) -> float:
    value = float(raw)
    if not 0 < value < float("inf"):
        raise ValueError("expected a number of seconds > 0")
    return value


def _module_name(raw: str) -> str:
    value = raw.strip()
    if not value or not all(part.isidentifier() for part in value.split(".")):
        raise ValueError("expected a dotted Python module name such as workers.actors")
    return value


def _port(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= MAX_PORT:
        raise ValueError(f"expected a port from 1 to {MAX_PORT}")
    return value


def _non_negative_float(raw: str) -> float:
    value = float(raw)
    if value < 0:
        raise ValueError("expected a number >= 0")
    return value


@dataclass(frozen=True, slots=True)
class Settings:
    """All Rifflux configuration. Build with :meth:`from_env`; override with ``replace``."""

    db_path: Path = DEFAULT_DB_PATH
    # Paths in the index are stored relative to this directory (POSIX separators), so
    # the same layout gives the same paths on every machine. Empty: the directory the
    # index was first built from, recorded in the database.
    base_dir: Path | None = None
    embedding_backend: str = "auto"
    hash_embedding_dim: int = 384
    embed_batch_size: int = 32
    # Most padded tokens (texts × longest text) in one ONNX run; bounds a worker's memory.
    embed_token_budget: int = 256
    # 0 lets onnxruntime pick (one thread per core).
    onnx_threads: int = 0
    max_chunk_chars: int = 1200
    # A piece shorter than this joins its neighbour when both fit in max_chunk_chars, so
    # runs of short markdown sections pack into full chunks. 600 (was 150) measured higher
    # file-level nDCG@10 on the awesome-copilot queries, a third fewer chunks to embed, and
    # not one SciFact chunk changed (BENCHMARKS.md). Above max/2 it changes little.
    min_chunk_chars: int = 600
    include_globs: tuple[str, ...] = DEFAULT_INCLUDE_GLOBS
    exclude_globs: tuple[str, ...] = DEFAULT_EXCLUDE_GLOBS
    max_file_bytes: int = 5_000_000
    # RRF's k. The product contract fixes the default at 60; k=10 measured +0.009
    # nDCG@10 on SciFact train (BENCHMARKS.md), so RIFFLUX_RRF_K=10 is a tuning option.
    rrf_k: int = 60
    candidate_multiplier: int = 2
    lexical_weight: float = 1.0
    semantic_weight: float = 1.0
    # The hybrid fusion of a search that names none (rifflux.search.fusion).
    fusion: str = "rrf"
    # The SEMANTIC share α of the score fusions: (1 − α) · keyword + α · vector. None:
    # each fusion's own default (minmax 0.6, the Context Harness spec's; maxnorm 0.5).
    # Before issue 12 this setting was maxnorm's lexical share: old x means 1 − x now.
    fusion_alpha: float | None = None
    # Query cache (rifflux.search.query_cache), per process: entries (0 turns it off),
    # MiB of stored responses, and lifetime. 32 MiB keeps an HTTP worker (~55 MiB with
    # the hash embedder, ~160 MiB with ONNX) under 300 MB with the cache full; it holds
    # ~250 top_k 100 responses, or 1,000 of top_k 10 (benchmarks/query_cache_memory.py).
    query_cache_size: int = 1000
    query_cache_max_mb: int = 32
    query_cache_ttl_seconds: float = 300.0
    # Semantic search over the vector cache: "exact" scans every row; "hnsw" gives every
    # segment an HNSW graph whose candidates are rescored exactly; "auto" gives one to
    # segments of >= 200k rows (rifflux.vectors.hnsw). A reader set to "exact" ignores
    # graphs, so RIFFLUX_VECTOR_INDEX=exact turns approximate search off. In every mode a
    # graph whose recall@10, measured when it is built, is below 0.95 is not used.
    vector_index: str = "auto"
    # HNSW search breadth (candidates a graph search keeps). CFS-012 uses 50; 200 is what
    # reached recall@10 >= 0.98 on 1M clustered rows (rifflux.vectors.hnsw.DEFAULT_EF).
    hnsw_ef: int = 200
    # Empty: an SQLite broker file next to the index database.
    broker_url: str = ""
    # Target size of one batch (bytes of file text): one chunk message, then one embed
    # message. 512 KB against 256 KB: fewer broker and index transactions, a full MCP
    # reindex of awesome-copilot (hash) 5.0 → 4.5 s and every file keyword-searchable
    # (ONNX) 5.6 → 5.2 s; a job under 16 batches' worth is split finer (MIN_BATCHES), so
    # the embed tail stays within ~1/32 of a job (BENCHMARKS.md, issue 13).
    batch_target_bytes: int = 512_000
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    # A worker process is replaced, between messages, after this many messages or once
    # its resident memory passes this many MB (0: no limit), as Celery's
    # max-tasks-per-child and max-memory-per-child. An onnx worker peaks at ~200-230 MB
    # on a 600-file job (BENCHMARKS.md), so 1024 MB only catches a leak or a huge batch.
    worker_max_messages: int = 0
    worker_max_rss_mb: int = 1024
    # Threads each worker process gives the index-host queues (plan, chunk and write)
    # apart from its embed thread, so a batch's keyword-searchable rows are written while
    # the process embeds another batch (0: one set of threads for every queue).
    lexical_threads: int = 1
    # How many nice levels lower a split worker process runs its embed thread (and the
    # ONNX threads it starts) than its index-host threads. 0 (equal) met both issue-13
    # targets on an idle 2-core machine: every file keyword-searchable in 7.7 s and the
    # pipeline at 0.99x the raw embedder, where 10 gave 0.89x (BENCHMARKS.md, issue 13).
    # A higher value lets lexical work win the CPU on a machine shared with busy jobs.
    embed_nice: int = 0
    # How many nice levels lower worker processes run than the process that starts them
    # (the server's local pool, ``rifflux worker``). Searches run in the front process:
    # under nice 0 an ONNX reindex on every core took an equal share of the CPU from
    # them; 10 lets a search preempt indexing, which takes the CPU back whenever nothing
    # else wants it (BENCHMARKS.md, "Agent-style questions").
    worker_nice: int = 10
    # The module whose import declares the actors worker processes run.
    worker_actors: str = "workers.actors"
    # A job whose pending messages have had no live consumer for this long is stalled:
    # a waiting client starts a local pool if it may, or fails with one line.
    stall_seconds: float = 60.0
    # At startup, workers launched beside the MCP server (the Procfile's) get this long to
    # show up before the server starts a local pool of its own.
    startup_worker_grace_seconds: float = 15.0
    http_host: str = "127.0.0.1"
    http_port: int = 8765
    http_token: str = ""
    # Live streamable HTTP sessions; past it the least recently used idle one is closed.
    http_max_sessions: int = 100
    # An HTTP session with no request in flight for this long is closed (404 afterwards).
    http_session_idle_seconds: float = 600.0
    # Most seconds a client may take to send one request's head and body (slowloris).
    http_request_timeout_seconds: float = 30.0
    # Front processes serving streamable HTTP on one port (rifflux serve --http-workers);
    # more than one serves stateless JSON (rifflux.mcp.http_workers).
    http_workers: int = field(default_factory=usable_cpus)
    log_level: str = "INFO"
    # workers.log (a local pool's output, written by the process that started it) is
    # rotated past this many bytes, keeping rifflux.logs.LOG_BACKUPS older files.
    log_max_bytes: int = 20_000_000
    file_watcher: bool = False
    file_watcher_paths: tuple[str, ...] = ()
    file_watcher_debounce_ms: int = 500
    auto_reindex_on_search: bool = False
    # Empty: the server's working directory.
    auto_reindex_paths: tuple[str, ...] = ()
    auto_reindex_min_interval_seconds: float = 30.0
    # Where the MCP server may index and serve files (docs/security.md). Empty: the
    # server's working directory, unless that is /, a home directory or a parent of one
    # (then no default root). Relative entries resolve against that directory.
    allowed_roots: tuple[str, ...] = ()
    # Index and serve paths on the built-in deny list (rifflux.index.denied: .ssh, id_*,
    # *.pem, .env*...); no allowed root overrides the list, only this.
    allow_secret_paths: bool = False
    # Whether the MCP search tool accepts a db_path argument (always opened read-only).
    allow_db_path: bool = True
    # Every search (CLI, MCP, SearchService) fails with one line past this many seconds
    # (rifflux.search.deadline): SQLite work is interrupted, Python loops check between
    # pieces, so one hostile call cannot hold the server.
    search_timeout_seconds: float = 10.0
    # The size, in estimated tokens of its compact JSON, that an MCP tool's answer keeps
    # to when the call gives no max_tokens: search results are trimmed as max_tokens
    # trims them, files cut in order, and the answer says so (budget). 0: no limit.
    max_response_tokens: int = 20_000

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        overrides: dict[str, Any] = {}

        def read(name: str, attr: str, parse: Callable[[str], T]) -> None:
            for key in (PREFIX + name, LEGACY_PREFIX + name):
                if key in env:
                    try:
                        overrides[attr] = parse(env[key])
                    except ValueError as exc:
                        raise ConfigError(f"{key}={env[key]!r} is invalid: {exc}") from None
                    return

        read("DB_PATH", "db_path", Path)
        read("BASE_DIR", "base_dir", lambda raw: Path(raw) if raw.strip() else None)
        read("EMBEDDING_BACKEND", "embedding_backend", _parse_backend)
        read("EMBEDDING_DIM", "hash_embedding_dim", _positive_int)
        read("EMBED_BATCH_SIZE", "embed_batch_size", _positive_int)
        read("EMBED_TOKEN_BUDGET", "embed_token_budget", _positive_int)
        read("ONNX_THREADS", "onnx_threads", _non_negative_int)
        read("MAX_CHUNK_CHARS", "max_chunk_chars", _positive_int)
        read("MIN_CHUNK_CHARS", "min_chunk_chars", _non_negative_int)
        read("INDEX_INCLUDE_GLOBS", "include_globs", _parse_list)
        read("INDEX_EXCLUDE_GLOBS", "exclude_globs", _parse_list)
        read("MAX_FILE_BYTES", "max_file_bytes", _positive_int)
        read("RRF_K", "rrf_k", _positive_int)
        read("CANDIDATE_MULTIPLIER", "candidate_multiplier", _positive_int)
        read("LEXICAL_WEIGHT", "lexical_weight", _non_negative_float)
        read("SEMANTIC_WEIGHT", "semantic_weight", _non_negative_float)
        read("FUSION", "fusion", _parse_fusion)
        read("FUSION_ALPHA", "fusion_alpha", _unit_float)
        read("VECTOR_INDEX", "vector_index", _parse_vector_index)
        read("HNSW_EF", "hnsw_ef", _positive_int)
        read("QUERY_CACHE_SIZE", "query_cache_size", _non_negative_int)
        read("QUERY_CACHE_MAX_MB", "query_cache_max_mb", _non_negative_int)
        read("QUERY_CACHE_TTL_SECONDS", "query_cache_ttl_seconds", _positive_float)
        read("BROKER_URL", "broker_url", str.strip)
        read("BATCH_TARGET_BYTES", "batch_target_bytes", _positive_int)
        read("WORKERS", "workers", _positive_int)
        read("WORKER_MAX_MESSAGES", "worker_max_messages", _non_negative_int)
        read("WORKER_MAX_RSS_MB", "worker_max_rss_mb", _non_negative_int)
        read("LEXICAL_THREADS", "lexical_threads", _non_negative_int)
        read("EMBED_NICE", "embed_nice", _non_negative_int)
        read("WORKER_NICE", "worker_nice", _non_negative_int)
        read("WORKER_ACTORS", "worker_actors", _module_name)
        read("STALL_SECONDS", "stall_seconds", _positive_float)
        read("STARTUP_WORKER_GRACE_SECONDS", "startup_worker_grace_seconds", _non_negative_float)
        read("HTTP_HOST", "http_host", str.strip)
        read("HTTP_PORT", "http_port", _port)
        read("HTTP_TOKEN", "http_token", str.strip)
        read("HTTP_MAX_SESSIONS", "http_max_sessions", _positive_int)
        read("HTTP_SESSION_IDLE_SECONDS", "http_session_idle_seconds", _positive_seconds)
        read("HTTP_REQUEST_TIMEOUT_SECONDS", "http_request_timeout_seconds", _positive_seconds)
        read("HTTP_WORKERS", "http_workers", _positive_int)
        read("LOG_LEVEL", "log_level", lambda raw: raw.strip().upper() or "INFO")
        read("LOG_MAX_BYTES", "log_max_bytes", _positive_int)
        read("FILE_WATCHER", "file_watcher", _parse_bool)
        read("FILE_WATCHER_PATHS", "file_watcher_paths", _parse_list)
        read("FILE_WATCHER_DEBOUNCE_MS", "file_watcher_debounce_ms", _non_negative_int)
        read("AUTO_REINDEX_ON_SEARCH", "auto_reindex_on_search", _parse_bool)
        read("AUTO_REINDEX_PATHS", "auto_reindex_paths", _parse_list)
        read(
            "AUTO_REINDEX_MIN_INTERVAL_SECONDS",
            "auto_reindex_min_interval_seconds",
            _non_negative_float,
        )
        read("ALLOWED_ROOTS", "allowed_roots", _parse_list)
        read("ALLOW_DB_PATH", "allow_db_path", _parse_bool)
        read("ALLOW_SECRET_PATHS", "allow_secret_paths", _parse_bool)
        read("SEARCH_TIMEOUT_SECONDS", "search_timeout_seconds", _positive_float)
        read("MAX_RESPONSE_TOKENS", "max_response_tokens", _response_tokens)
        settings = cls(**overrides)
        if settings.min_chunk_chars > settings.max_chunk_chars:
            if "min_chunk_chars" not in overrides:
                # Only the maximum was set, below the default minimum: the default yields.
                return replace(settings, min_chunk_chars=settings.max_chunk_chars)
            raise ConfigError(
                f"RIFFLUX_MIN_CHUNK_CHARS ({settings.min_chunk_chars}) must not exceed "
                f"RIFFLUX_MAX_CHUNK_CHARS ({settings.max_chunk_chars})"
            )
        return settings

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with some fields replaced (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @property
    def sqlite_broker_path(self) -> Path | None:
        """The queue database file when the broker is SQLite, else None."""
        url = self.resolved_broker_url
        if not url.lower().startswith("sqlite:///"):
            return None
        path = url[len("sqlite:///") :].partition("?")[0]
        return Path(path) if path else None

    @property
    def resolved_broker_url(self) -> str:
        if self.broker_url:
            return self.broker_url
        return f"sqlite:///{self.db_path.resolve().parent / 'queue.db'}"
