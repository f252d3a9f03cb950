"""Typed settings: one table of ``RIFFLUX_*`` environment variables, read once a process.

Invariants a reader may rely on:

* :data:`SETTINGS` is the only list of environment variables. Each row names one variable,
  its type, the :class:`Settings` field it sets and a one-line help; :meth:`Settings.from_env`,
  the README's configuration table (:func:`markdown_table`, checked by
  ``tests/test_settings_table.py``) and ``rifflux settings`` are all made from it.
* A row marked ``internal`` is tuning that tests and benchmarks set through the environment
  of the processes they start; it is listed apart from the user settings.
* Fields of :class:`Settings` without a row are tuning constants (defaults below): code,
  tests and benchmarks pass other values as fields, no environment variable sets them
  (one that used to, :data:`RETIRED`, is ignored; the CLI warns).
* A process reads its environment once (``rifflux.cli.main`` hands its one
  :class:`Settings` to every command). The ``RIFLUX_`` (one F) spelling is refused with
  one line naming the right one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from rifflux.errors import ConfigError

PREFIX = "RIFFLUX_"
MISSPELLED_PREFIX = "RIFLUX_"

DEFAULT_DB_PATH = Path(".rifflux") / "index.db"
DEFAULT_INCLUDE_GLOBS = ("*.md", "*.markdown", "*.mdx", "*.txt")
DEFAULT_EXCLUDE_GLOBS = (".git", ".venv", "node_modules", "__pycache__", ".rifflux")
EMBEDDING_BACKENDS = ("auto", "onnx", "hash", "torch")
# Hybrid fusions: reciprocal rank fusion, or a weighted sum of min-max or max-scaled scores.
FUSIONS = ("rrf", "minmax", "maxnorm")
VECTOR_INDEXES = ("auto", "exact", "hnsw")

MAX_PORT = 65535

# Tuning constants: measured defaults, not environment variables (docs/benchmarks-history.md
# has the measurements). Tests and benchmarks pass other values as Settings fields.
EMBED_BATCH_SIZE = 32
"""Most texts in one ONNX run."""
EMBED_TOKEN_BUDGET = 256
"""Most padded tokens (texts × longest text) in one ONNX run; bounds a worker's memory."""
HASH_EMBEDDING_DIM = 384
"""Dimension of the ``hash`` embedder's vectors."""
CANDIDATE_MULTIPLIER = 2
"""Candidates each ranking fetches for fusion: ``top_k ×`` this (a call's ``candidate_k``
overrides it)."""
QUERY_CACHE_TTL_SECONDS = 300.0
"""How long a cached search response lives (the cache also empties when the index changes)."""
LEXICAL_THREADS = 1
"""Threads a worker process gives the index-host queues (plan, chunk, write) apart from
its embed thread, so keyword-searchable rows are written while it embeds (0: one set of
threads for every queue)."""
EMBED_NICE = 0
"""Nice levels a split worker runs its embed thread (and its ONNX threads) below its
index-host threads; 0 met both indexing targets on an idle machine."""
FILE_WATCHER_DEBOUNCE_MS = 500
"""File events closer than this are one batch."""
AUTO_REINDEX_MIN_INTERVAL_SECONDS = 30.0
"""Least time between two background jobs that searches start (auto-reindex)."""


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


def _parse_device(raw: str) -> str:
    value = raw.strip().lower() or "cpu"
    prefix, colon, index = value.partition(":")
    if value == "cpu" or (prefix == "cuda" and (not colon or index.isdigit())):
        return value
    raise ValueError("expected cpu, cuda or cuda:N")


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


def _optional_path(raw: str) -> Path | None:
    return Path(raw) if raw.strip() else None


def _optional_home_path(raw: str) -> Path | None:
    return Path(raw.strip()).expanduser() if raw.strip() else None


def _log_level(raw: str) -> str:
    return raw.strip().upper() or "INFO"


@dataclass(frozen=True, slots=True)
class Settings:
    """All Rifflux configuration. Build with :meth:`from_env`; override with ``replace``.

    What each field means is in :data:`SETTINGS` (or, for tuning, at its constant).
    """

    db_path: Path = DEFAULT_DB_PATH
    # None: the directory the index was first built from, recorded in the database.
    base_dir: Path | None = None
    embedding_backend: str = "auto"
    embedding_device: str = "cpu"
    hash_embedding_dim: int = HASH_EMBEDDING_DIM
    embed_batch_size: int = EMBED_BATCH_SIZE
    embed_token_budget: int = EMBED_TOKEN_BUDGET
    onnx_threads: int = 0
    max_chunk_chars: int = 1200
    # 600 measured higher file-level nDCG@10 on the awesome-copilot queries than 150, with
    # a third fewer chunks to embed; above max/2 it changes little.
    min_chunk_chars: int = 600
    include_globs: tuple[str, ...] = DEFAULT_INCLUDE_GLOBS
    exclude_globs: tuple[str, ...] = DEFAULT_EXCLUDE_GLOBS
    max_file_bytes: int = 5_000_000
    # The product contract fixes RRF's k at 60 (k=10 measured +0.009 nDCG@10 on SciFact).
    rrf_k: int = 60
    candidate_multiplier: int = CANDIDATE_MULTIPLIER
    lexical_weight: float = 1.0
    semantic_weight: float = 1.0
    fusion: str = "rrf"
    # None: each fusion's own default (minmax 0.6, maxnorm 0.5).
    fusion_alpha: float | None = None
    query_cache_size: int = 1000
    # 32 MiB keeps an HTTP worker under 300 MB with the cache full.
    query_cache_max_mb: int = 32
    query_cache_ttl_seconds: float = QUERY_CACHE_TTL_SECONDS
    vector_index: str = "auto"
    # 200 reached recall@10 >= 0.98 on 1M clustered rows (rifflux.vectors.hnsw.DEFAULT_EF).
    hnsw_ef: int = 200
    # Empty: an SQLite broker file next to the index database.
    broker_url: str = ""
    # 512 KB: fewer broker and index transactions than 256 KB, and a faster full reindex;
    # a job under 16 batches' worth is split finer (MIN_BATCHES).
    batch_target_bytes: int = 512_000
    workers: int = field(default_factory=usable_cpus)
    worker_max_messages: int = 0
    # An onnx worker peaks at ~200-230 MB on a 600-file job: 1024 only catches a leak.
    worker_max_rss_mb: int = 1024
    lexical_threads: int = LEXICAL_THREADS
    embed_nice: int = EMBED_NICE
    # 10 lets a search in the front process preempt indexing, which takes the CPU back
    # whenever nothing else wants it.
    worker_nice: int = 10
    worker_actors: str = "workers.actors"
    stall_seconds: float = 60.0
    startup_worker_grace_seconds: float = 15.0
    http_host: str = "127.0.0.1"
    http_port: int = 8765
    http_token: str = ""
    http_max_sessions: int = 100
    http_session_idle_seconds: float = 600.0
    http_request_timeout_seconds: float = 30.0
    http_workers: int = field(default_factory=usable_cpus)
    log_level: str = "INFO"
    log_max_bytes: int = 20_000_000
    file_watcher: bool = False
    file_watcher_paths: tuple[str, ...] = ()
    file_watcher_debounce_ms: int = FILE_WATCHER_DEBOUNCE_MS
    auto_reindex_on_search: bool = False
    auto_reindex_paths: tuple[str, ...] = ()
    auto_reindex_min_interval_seconds: float = AUTO_REINDEX_MIN_INTERVAL_SECONDS
    allowed_roots: tuple[str, ...] = ()
    allow_secret_paths: bool = False
    grep_index: bool = True
    allow_db_path: bool = True
    search_timeout_seconds: float = 10.0
    max_response_tokens: int = 20_000
    # None: rifflux.eval.beir.DEFAULT_CACHE_ROOT.
    eval_cache_dir: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Every :data:`SETTINGS` row whose variable ``env`` (default ``os.environ``) sets."""
        env = os.environ if env is None else env
        refuse_misspelled(env)
        overrides: dict[str, Any] = {}
        for row in SETTINGS:
            if row.variable in env:
                overrides[row.attr] = row.read(env[row.variable])
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


@dataclass(frozen=True, slots=True)
class Setting:
    """One environment variable: ``RIFFLUX_<name>`` sets ``Settings.<attr>``."""

    name: str
    attr: str
    type: str
    parse: Callable[[str], Any]
    help: str
    # How to show a default that is not the field's plain value (prose, markdown).
    default: str | None = None
    # Tuning that tests and benchmarks set through the environment; not a user setting.
    internal: bool = False

    @property
    def variable(self) -> str:
        return PREFIX + self.name

    def read(self, raw: str) -> Any:
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{self.variable}={raw!r} is invalid: {exc}") from None

    @property
    def default_text(self) -> str:
        """The default as the README shows it: a literal in backticks, else prose."""
        if self.default is not None:
            return self.default
        value = _FIELDS[self.attr].default
        if value is MISSING:
            raise TypeError(f"{self.variable}: a computed default needs a default text")
        return f"`{show(value)}`" if show(value) else "empty"


_FIELDS = {f.name: f for f in fields(Settings)}

S = Setting
SETTINGS: tuple[Setting, ...] = (
    S("DB_PATH", "db_path", "path", Path, "Index database."),
    S(
        "BASE_DIR", "base_dir", "path", _optional_path,
        "Stored paths are relative to it, and so are relative paths in MCP tool calls; an "
        "MCP server given it works in it.",
        default="first index run's working directory",
    ),
    S(
        "EMBEDDING_BACKEND", "embedding_backend", "auto / onnx / hash / torch", _parse_backend,
        "`onnx`, `hash` (feature hashing, fast, weaker), `auto` (onnx when installed), or "
        "`torch`: the same MiniLM through PyTorch (`pip install 'rifflux[gpu]'`), whose "
        "vectors are labelled apart from onnx's: set it where a job is submitted and where "
        "it is searched to have the job embedded by GPU workers ([GPU embedding]"
        "(#gpu-embedding)).",
    ),
    S(
        "EMBEDDING_DEVICE", "embedding_device", "cpu / cuda / cuda:N", _parse_device,
        "Where this process embeds. `cuda` or `cuda:N`: with the `torch` embedder on that "
        "GPU (the backend must be `torch` or `auto`; no GPU or no torch is an error, never "
        "another model); `cpu`: the configured backend on the CPU. `rifflux worker "
        "--device` sets it for a pool.",
    ),
    S(
        "ONNX_THREADS", "onnx_threads", "int ≥ 0", _non_negative_int,
        "onnxruntime (and the CPU torch embedder's) intra-op threads per process. `0`: a "
        "pool's worker processes share the CPUs evenly, and a search's query embedder "
        "takes one thread (a query is one short text, which one thread embeds fastest).",
        default="`0`: CPUs ÷ worker processes; 1 for the server's query embedder",
    ),
    S(
        "MAX_CHUNK_CHARS", "max_chunk_chars", "int ≥ 1", _positive_int,
        "Most characters of a prose chunk; a piece under 600 joins its neighbour when both "
        "fit (a maximum below 600 lowers that to it). Code stays whole up to a hard cap of "
        "4 × this, which no chunk exceeds: longer code is cut at line breaks.",
    ),
    S(
        "INDEX_INCLUDE_GLOBS", "include_globs", "list", _parse_list,
        "Comma-separated names of the files indexed.",
    ),
    S(
        "INDEX_EXCLUDE_GLOBS", "exclude_globs", "list", _parse_list,
        "Comma-separated names skipped; the index directory is always excluded.",
    ),
    S(
        "MAX_FILE_BYTES", "max_file_bytes", "int ≥ 1", _positive_int,
        "Larger files are skipped (and counted).",
    ),
    S(
        "GREP_INDEX", "grep_index", "0/1", _parse_bool,
        "`0`: jobs keep no text or trigram rows for exact and regex search "
        "(`grep_rifflux`, `rifflux grep`) and remove an index's: the database is ~1× the "
        "text smaller, a full index with the hash embedder takes ~30 % less CPU, and grep "
        "answers that it is off. `1` again: the next job writes them for every file.",
    ),
    S(
        "FUSION", "fusion", "rrf / minmax / maxnorm", _parse_fusion,
        "Hybrid fusion of searches that name none: `rrf`, `minmax` (the `fusion` "
        "argument's), or `maxnorm` ((1−α)·bm25/best + α·cosine/best; breakdown "
        "`{maxnorm, lexical_rank, semantic_rank}`).",
    ),
    S(
        "FUSION_ALPHA", "fusion_alpha", "0–1", _unit_float,
        "The **semantic** share α of `minmax` and `maxnorm` (the `alpha` argument "
        "overrides it). Older releases read it as `maxnorm`'s *lexical* share: an old "
        "setting `x` is `1 − x` now (e.g. `0.7` → `0.3`; `0.5` is unchanged).",
        default="unset: 0.6 for `minmax`, 0.5 for `maxnorm`",
        internal=True,
    ),
    S(
        "LEXICAL_WEIGHT", "lexical_weight", "number ≥ 0", _non_negative_float,
        "RRF weight of the keyword ranking (a call's `lexical_weight` overrides it).",
        internal=True,
    ),
    S(
        "SEMANTIC_WEIGHT", "semantic_weight", "number ≥ 0", _non_negative_float,
        "RRF weight of the semantic ranking (a call's `semantic_weight` overrides it).",
        internal=True,
    ),
    S(
        "VECTOR_INDEX", "vector_index", "auto / exact / hnsw", _parse_vector_index,
        "Semantic search: `exact` scans every vector (and ignores HNSW graphs); `hnsw` "
        "gives every cache segment an HNSW graph; `auto` gives one to segments of ≥ "
        "200,000 rows ([Approximate vector search](#approximate-vector-search)). In every "
        "mode a graph whose recall@10, measured against the exact scan when it is built, "
        "is below 0.95 is not used: that segment is scanned exactly (`rifflux status` says "
        "which and why).",
        internal=True,
    ),
    S(
        "QUERY_CACHE_SIZE", "query_cache_size", "int ≥ 0", _non_negative_int,
        "Search responses kept by the query cache (LRU, one per process; an entry lives 5 "
        "minutes, and the cache empties whenever the index changes); `0` turns it off.",
        internal=True,
    ),
    S(
        "QUERY_CACHE_MAX_MB", "query_cache_max_mb", "int ≥ 0", _non_negative_int,
        "MiB of responses (their JSON) the query cache holds per process; least recently "
        "used ones go first. 32 keeps an HTTP worker under 300 MB; `0` turns the cache off.",
    ),
    S(
        "SEARCH_TIMEOUT_SECONDS", "search_timeout_seconds", "seconds > 0", _positive_float,
        "Deadline of every search (CLI, MCP, `SearchService`): past it the call fails with "
        "one line (`search timed out after 10 s …`); SQLite work is interrupted, so one "
        "costly call never holds the server.",
    ),
    S(
        "MAX_RESPONSE_TOKENS", "max_response_tokens", "0 or 50–100000", _response_tokens,
        "The most estimated tokens an MCP tool's answer (its compact JSON) may take when "
        "the call gives no `max_tokens`: a larger one is fitted as `max_tokens` fits it "
        "and says so (`budget` with `dropped`); `0`: no limit.",
    ),
    S(
        "BROKER_URL", "broker_url", "URL", str.strip,
        "`sqlite:///rel.db`, `sqlite:////abs.db` (options "
        "`?lease_seconds=10&max_deliveries=5`), `redis://…`, `amqp://…`.",
        default="`sqlite:///<index dir>/queue.db`",
    ),
    S(
        "WORKERS", "workers", "int ≥ 1", _positive_int,
        "Worker processes `rifflux worker` and local pools start.",
        default="the CPU count (affinity)",
    ),
    S(
        "WORKER_MAX_MESSAGES", "worker_max_messages", "int ≥ 0", _non_negative_int,
        "A worker process is replaced after this many messages (between messages).",
        default="`0` (no limit)",
        internal=True,
    ),
    S(
        "WORKER_MAX_RSS_MB", "worker_max_rss_mb", "int ≥ 0", _non_negative_int,
        "A worker process is replaced once its resident memory passes this many MB "
        "(checked after each message; `0`: no limit). An onnx worker peaked at 197–231 MB "
        "on a 600-file job.",
    ),
    S(
        "HTTP_HOST", "http_host", "host", str.strip,
        "Streamable HTTP address (`serve --host` overrides it).",
    ),
    S(
        "HTTP_PORT", "http_port", "port", _port,
        "Streamable HTTP port (`serve --port` overrides it).",
    ),
    S(
        "HTTP_TOKEN", "http_token", "string", str.strip,
        "When set, every HTTP request needs `Authorization: Bearer <token>` (any case of "
        "`Bearer`). Required to listen beyond loopback: `serve --host 0.0.0.0` without it "
        "refuses to start.",
    ),
    S(
        "HTTP_MAX_SESSIONS", "http_max_sessions", "int ≥ 1", _positive_int,
        "Live HTTP sessions; past it the least recently used idle session is closed (its "
        "client gets 404 and initializes again).",
    ),
    S(
        "HTTP_SESSION_IDLE_SECONDS", "http_session_idle_seconds", "seconds > 0",
        _positive_seconds,
        "An HTTP session with no request in flight for this long is closed.",
    ),
    S(
        "HTTP_REQUEST_TIMEOUT_SECONDS", "http_request_timeout_seconds", "seconds > 0",
        _positive_seconds,
        "A client must send a request's head and body within this many seconds of its "
        "first byte (else 408 and disconnected).",
    ),
    S(
        "HTTP_WORKERS", "http_workers", "int ≥ 1", _positive_int,
        "HTTP front processes accepting on one port (`serve --http-workers N`). Above 1 "
        "they serve the SDK's stateless JSON mode (no sessions; `RIFFLUX_HTTP_MAX_SESSIONS` "
        "then caps requests in flight per process; client roots are not asked); the "
        "watcher and worker pool stay in the one supervising process; a worker killed is "
        "replaced ([docs/mcp.md](docs/mcp.md), \"Several HTTP workers\"). `1`: one process "
        "with sessions.",
        default="the CPU count (affinity)",
    ),
    S(
        "ALLOWED_ROOTS", "allowed_roots", "list", _parse_list,
        "Comma-separated directories the MCP server may index and serve; client roots "
        "narrow this. A server without any refuses `reindex`, `get_file` and `db_path` and "
        "says to set this ([docs/security.md](docs/security.md)).",
        default="server's working directory; **none** when that is `/`, a home directory "
        "or a parent of one",
    ),
    S(
        "ALLOW_SECRET_PATHS", "allow_secret_paths", "0/1", _parse_bool,
        "`1` indexes and serves paths on the built-in deny list (`.ssh`, `.gnupg`, `.aws`, "
        "`.azure`, `.kube`, `.docker`, `.config/gcloud`, `.password-store`, `id_*`, "
        "`*.pem`, `*.key`, `*.p12`, `.env*`, `.netrc`, `.pgpass`); CLI and MCP alike "
        "([docs/security.md](docs/security.md)).",
    ),
    S(
        "ALLOW_DB_PATH", "allow_db_path", "0/1", _parse_bool,
        "`0`: the `search_rifflux` tool refuses its `db_path` argument (which always opens "
        "read-only).",
    ),
    S(
        "FILE_WATCHER", "file_watcher", "0/1", _parse_bool,
        "`1`: `rifflux serve` also watches `RIFFLUX_FILE_WATCHER_PATHS` (events within "
        "half a second are one batch).",
    ),
    S(
        "FILE_WATCHER_PATHS", "file_watcher_paths", "list", _parse_list,
        "Comma-separated roots to watch.",
        default="server's working directory",
    ),
    S(
        "AUTO_REINDEX_ON_SEARCH", "auto_reindex_on_search", "0/1", _parse_bool,
        "`1`: a search starts a background incremental job of "
        "`RIFFLUX_AUTO_REINDEX_PATHS`, at most once per 30 s, never waiting for it.",
    ),
    S(
        "AUTO_REINDEX_PATHS", "auto_reindex_paths", "list", _parse_list,
        "Comma-separated roots for those jobs.",
        default="server's working directory",
    ),
    S(
        "EVAL_CACHE_DIR", "eval_cache_dir", "path", _optional_home_path,
        "Where `rifflux eval` keeps materialised datasets and their indexes.",
        default="`~/.cache/rifflux/eval`",
        internal=True,
    ),
    S(
        "LOG_LEVEL", "log_level", "level", _log_level,
        "Logs go to stderr: JSON lines for servers and workers, console lines for the "
        "CLI. No line carries file text or a queue message's body (ids, paths, sizes, "
        "counts and the error; a long value is cut).",
        default="`INFO` (CLI: `WARNING`)",
    ),
    S(
        "LOG_MAX_BYTES", "log_max_bytes", "int ≥ 1", _positive_int,
        "`workers.log` (the output of a local pool, written by the process that started "
        "it) is rotated past this size; `workers.log.1` … `.3` keep the older lines.",
        internal=True,
    ),
    # Internal: tuning and test seams that tests and benchmarks set in the environment
    # of the processes they start.
    S(
        "MIN_CHUNK_CHARS", "min_chunk_chars", "int ≥ 0", _non_negative_int,
        "A prose piece shorter than this joins its neighbour when both fit in "
        "`RIFFLUX_MAX_CHUNK_CHARS`.",
        internal=True,
    ),
    S("RRF_K", "rrf_k", "int ≥ 1", _positive_int, "Reciprocal Rank Fusion's k.", internal=True),
    S(
        "HNSW_EF", "hnsw_ef", "int ≥ 1", _positive_int,
        "Candidates an HNSW graph search keeps before they are rescored exactly.",
        internal=True,
    ),
    S(
        "BATCH_TARGET_BYTES", "batch_target_bytes", "int ≥ 1", _positive_int,
        "File text per batch (one chunk message; its texts to embed go out as embed units).",
        internal=True,
    ),
    S(
        "WORKER_NICE", "worker_nice", "int ≥ 0", _non_negative_int,
        "Nice levels worker processes run below the process that starts their pool.",
        internal=True,
    ),
    S(
        "WORKER_ACTORS", "worker_actors", "module", _module_name,
        "The module worker processes import to declare their actors (failure injection).",
        internal=True,
    ),
    S(
        "STALL_SECONDS", "stall_seconds", "seconds > 0", _positive_float,
        "A job whose pending messages have had no live consumer for this long is stalled.",
        internal=True,
    ),
    S(
        "STARTUP_WORKER_GRACE_SECONDS", "startup_worker_grace_seconds", "seconds ≥ 0",
        _non_negative_float,
        "How long `rifflux serve` waits for workers started beside it before its own pool.",
        internal=True,
    ),
)  # fmt: skip
"""Every environment variable Rifflux reads, user settings first."""
del S


def command_settings(args: object) -> Settings:
    """The settings a command works with: those ``rifflux.cli.main`` read once
    (``args.settings``), else the environment's (a handler called on its own)."""
    settings = getattr(args, "settings", None)
    return settings if isinstance(settings, Settings) else Settings.from_env()


RETIRED = (
    "EMBEDDING_DIM",
    "EMBED_BATCH_SIZE",
    "EMBED_TOKEN_BUDGET",
    "CANDIDATE_MULTIPLIER",
    "QUERY_CACHE_TTL_SECONDS",
    "LEXICAL_THREADS",
    "EMBED_NICE",
    "FILE_WATCHER_DEBOUNCE_MS",
    "AUTO_REINDEX_MIN_INTERVAL_SECONDS",
)
"""Variables that were settings and are now tuning constants: set, they are ignored."""


def ignored_variables(env: Mapping[str, str]) -> list[str]:
    """The :data:`RETIRED` variables ``env`` sets, for a warning."""
    return [PREFIX + name for name in RETIRED if PREFIX + name in env]


def refuse_misspelled(env: Mapping[str, str]) -> None:
    """One line naming the right spelling of a ``RIFLUX_*`` (one F) variable, if one is set."""
    for key in sorted(k for k in env if k.startswith(MISSPELLED_PREFIX)):
        right = PREFIX + key[len(MISSPELLED_PREFIX) :]
        raise ConfigError(f"{key} is not read (the prefix has two Fs): set {right} instead")


def show(value: object) -> str:
    """A setting's value as its environment variable would spell it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def user_settings(include_internal: bool = False) -> Iterable[Setting]:
    return (row for row in SETTINGS if include_internal or not row.internal)


def describe(settings: Settings, include_internal: bool = False) -> list[dict[str, Any]]:
    """Each setting's name, current value, default, type and help (``rifflux settings``)."""
    return [
        {
            "name": row.variable,
            "value": show(getattr(settings, row.attr)),
            "default": row.default_text,
            "type": row.type,
            "help": row.help,
            "internal": row.internal,
        }
        for row in user_settings(include_internal)
    ]


def markdown_table() -> str:
    """The README's configuration table: one line per user setting, then the internal ones."""
    lines = ["| Variable | Type | Default | Meaning |", "|---|---|---|---|"]
    for row in user_settings():
        lines.append(f"| `{row.variable}` | {row.type} | {row.default_text} | {row.help} |")
    internal = ", ".join(f"`{row.variable}`" for row in SETTINGS if row.internal)
    lines += [
        "",
        f"Also read, for tests, benchmarks and evaluation: {internal}. They are internal "
        "tuning, which may change (`rifflux settings --all` lists them with their help).",
    ]
    return "\n".join(lines) + "\n"
