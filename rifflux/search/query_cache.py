"""The query cache (CFS-012): recent search responses, never staler than the index.

Invariants:

* LRU of ``RIFFLUX_QUERY_CACHE_SIZE`` entries (default 1,000; 0 turns the cache off),
  each living ``RIFFLUX_QUERY_CACHE_TTL_SECONDS`` (default 300 s, the spec's 5 minutes).
* The key is the whole validated :class:`~rifflux.search.request.SearchRequest` (every
  argument, normalised, so ``"docs/**"`` and ``["docs/**"]`` are one key); one cache
  belongs to one ``SearchService``, so to one index and one set of settings.
* Every entry carries the index *state* it was computed at: the generation, the index
  uid (a rebuilt index restarts its generations) and the stat keys (inode, mtime, size)
  of the database, its WAL and every vector cache file (a publish at the same
  generation changes what semantic search sees; a damaged file must be noticed by the
  next search, as without the cache). A lookup reads the current state first (one
  SQLite read, a few ``stat`` calls); the first lookup that sees a new state empties
  the whole cache. So a cached answer is served only while the
  index is exactly as it was when the answer was computed.
* A state read before a search labels its result: a write that lands during the search
  can only make the label older than the data, and an older label is never served again
  (generations only grow, and a new uid or manifest never equals an old one).
* Responses with a ``warning`` (a corrupt vector cache) are not cached, so a repair
  shows at once. Hits are deep copies: a caller may change what it gets.

Measured (BENCHMARKS.md, issue 12): a hit costs ~0.1 ms against ~10-25 ms for a hybrid
search on SciFact.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

DEFAULT_SIZE = 1000
DEFAULT_TTL_SECONDS = 300.0

State = Hashable


class QueryCache:
    """A thread-safe LRU of responses with a TTL, emptied when the index state moves."""

    def __init__(
        self,
        size: int = DEFAULT_SIZE,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = size
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._entries: OrderedDict[Hashable, tuple[float, dict[str, Any]]] = OrderedDict()
        self._state: State | None = None
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.size > 0

    def __len__(self) -> int:
        return len(self._entries)

    def _observe(self, state: State) -> None:
        """Empty the cache when the index state moved (call with the lock held)."""
        if state != self._state:
            self._entries.clear()
            self._state = state

    def get(self, key: Hashable, state: State) -> dict[str, Any] | None:
        """A copy of the response cached for ``key`` at ``state``, if still alive."""
        if not self.enabled:
            return None
        with self._lock:
            self._observe(state)
            entry = self._entries.get(key)
            if entry is None or self._clock() - entry[0] > self.ttl_seconds:
                if entry is not None:
                    del self._entries[key]
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            response = entry[1]
        return copy.deepcopy(response)

    def put(self, key: Hashable, state: State, response: dict[str, Any]) -> None:
        """Remember ``response`` for ``key``, computed at ``state`` (read before it ran,
        by the :meth:`get` that missed); dropped if the state moved since."""
        if not self.enabled:
            return
        stored = copy.deepcopy(response)
        with self._lock:
            if state != self._state:
                return  # The index moved since the lookup: this answer is already old.
            self._entries[key] = (self._clock(), stored)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._state = None
