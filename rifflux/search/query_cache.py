"""The query cache: recent search responses, never staler than the index.

Invariants:

* LRU bounded twice, per process: at most ``RIFFLUX_QUERY_CACHE_SIZE`` entries (default
  1,000; 0 turns the cache off) holding at most ``RIFFLUX_QUERY_CACHE_MAX_MB`` MiB
  (default 32), each entry living ``rifflux.config.QUERY_CACHE_TTL_SECONDS`` (300 s,
  the spec's 5 minutes). An entry is stored as its response's compact ASCII JSON, one
  ``str``: its size, counted with its key's ``repr``, is what the entry holds in memory
  (``sys.getsizeof``), so the byte bound bounds memory, not a guess; a hit decodes a
  fresh copy (a caller may change what it gets). A put evicts the least recently used
  entries until both bounds hold; a response larger than the byte bound alone is not
  kept, and neither is one JSON cannot write.
* The key is the whole validated :class:`~rifflux.search.request.SearchRequest` (every
  argument, normalised, so ``"docs/**"`` and ``["docs/**"]`` are one key) within a
  *scope*, one per index database: the services of one process (the MCP server's own
  and those it opens for ``db_path`` searches) share one cache, so its bounds are the
  process's.
* Every entry carries the index *state* it was computed at: the generation, the index
  uid (a rebuilt index restarts its generations) and the stat keys (inode, mtime, size)
  of the database, its WAL and every vector cache file (a publish at the same
  generation changes what semantic search sees; a damaged file must be noticed by the
  next search, as without the cache). A lookup reads the current state first (one
  SQLite read, a few ``stat`` calls); the first lookup of a scope that sees a new state
  empties that scope. So a cached answer is served only while the index is exactly as
  it was when the answer was computed.
* A state read before a search labels its result: a write that lands during the search
  can only make the label older than the data, and an older label is never served again
  (generations only grow, and a new uid or manifest never equals an old one).
* Responses with a ``warning`` (a corrupt vector cache) are not cached, so a repair
  shows at once.

What a hit saves and what the bounds hold: docs/architecture.md, "Query cache".
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

DEFAULT_SIZE = 1000
DEFAULT_MAX_BYTES = 32 * 2**20
DEFAULT_TTL_SECONDS = 300.0

State = Hashable


class _Entry:
    __slots__ = ("nbytes", "stored_at", "text")

    def __init__(self, stored_at: float, text: str, nbytes: int) -> None:
        self.stored_at = stored_at
        self.text = text
        self.nbytes = nbytes


class QueryCache:
    """A thread-safe LRU of responses with a TTL, bounded by entries and bytes, each
    scope emptied when its index state moves."""

    def __init__(
        self,
        size: int = DEFAULT_SIZE,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._entries: OrderedDict[tuple[Hashable, Hashable], _Entry] = OrderedDict()
        self._states: dict[Hashable, State] = {}
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.size > 0 and self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    def _observe(self, scope: Hashable, state: State) -> None:
        """Empty ``scope`` when its index state moved (call with the lock held)."""
        if scope in self._states and self._states[scope] == state:
            return
        for full_key in [k for k in self._entries if k[0] == scope]:
            self._drop(full_key)
        self._states[scope] = state

    def _drop(self, full_key: tuple[Hashable, Hashable]) -> None:
        self.bytes -= self._entries.pop(full_key).nbytes

    def get(self, key: Hashable, state: State, *, scope: Hashable = None) -> dict[str, Any] | None:
        """A copy of the response cached for ``key`` at ``state``, if still alive."""
        if not self.enabled:
            return None
        full_key = (scope, key)
        with self._lock:
            self._observe(scope, state)
            entry = self._entries.get(full_key)
            if entry is None or self._clock() - entry.stored_at > self.ttl_seconds:
                if entry is not None:
                    self._drop(full_key)
                self.misses += 1
                return None
            self._entries.move_to_end(full_key)
            self.hits += 1
            text = entry.text
        response: dict[str, Any] = json.loads(text)
        return response

    def put(
        self, key: Hashable, state: State, response: dict[str, Any], *, scope: Hashable = None
    ) -> None:
        """Remember ``response`` for ``key``, computed at ``state`` (read before it ran,
        by the :meth:`get` that missed); dropped if the state moved since."""
        if not self.enabled:
            return
        try:
            text = json.dumps(response, separators=(",", ":"))
        except (TypeError, ValueError):
            return  # Not JSON (a caller's own value): not kept.
        nbytes = sys.getsizeof(text) + len(repr(key))
        if nbytes > self.max_bytes:
            return
        full_key = (scope, key)
        with self._lock:
            if scope not in self._states or self._states[scope] != state:
                return  # The index moved since the lookup: this answer is already old.
            if full_key in self._entries:
                self._drop(full_key)
            self._entries[full_key] = _Entry(self._clock(), text, nbytes)
            self.bytes += nbytes
            while len(self._entries) > self.size or self.bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._states.clear()
            self.bytes = 0
