"""The deadline every search runs under (``RIFFLUX_SEARCH_TIMEOUT_SECONDS``, default 10 s).

Invariants (one search must never hold the server):

* A search past its deadline fails with one line, :class:`~rifflux.errors.SearchTimeoutError`
  (``search timed out after 10 s (RIFFLUX_SEARCH_TIMEOUT_SECONDS); narrow the query or
  filters``), and the MCP server and the CLI report it like any other user error.
* Cooperative and real: SQLite work (FTS5 ``MATCH`` and ``bm25()``, the
  ``content_contains`` scan, reading rows) is aborted from SQLite's progress handler,
  called every ``PROGRESS_OPS`` virtual-machine instructions, which makes the running
  statement fail with "interrupted"; Python loops (the filters' file loop, the vector
  scan between segments, the budget between results, file grouping's deeper rounds) call
  :meth:`Deadline.check` between pieces. No thread is killed and nothing is left half done.
* The handler interrupts once: after that SQLite statements run again, so a read
  transaction open around the interrupted statement still rolls back, and the
  connection (a per-thread, reused one) serves the next search.
* Negligible cost when nothing expires: two ``set_progress_handler`` calls per search
  and one clock read per ``PROGRESS_OPS`` instructions.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rifflux.errors import SearchTimeoutError

PROGRESS_OPS = 10_000
"""SQLite virtual-machine instructions between two deadline checks (well under 1 ms)."""
SETTING = "RIFFLUX_SEARCH_TIMEOUT_SECONDS"


def timeout_error(seconds: float) -> SearchTimeoutError:
    return SearchTimeoutError(
        f"search timed out after {seconds:g} s ({SETTING}); narrow the query or filters"
    )


def is_interrupt(exc: BaseException) -> bool:
    """SQLite's answer to a progress handler that asked it to stop."""
    return isinstance(exc, sqlite3.OperationalError) and "interrupted" in str(exc).lower()


class Deadline:
    """``seconds`` from now on ``clock``; :meth:`check` raises once it has passed."""

    __slots__ = ("_clock", "_end", "_fired", "seconds")

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds
        self._fired = False

    def expired(self) -> bool:
        return self._clock() >= self._end

    def check(self) -> None:
        """Raise the one-line SearchTimeoutError when the deadline has passed."""
        if self.expired():
            raise timeout_error(self.seconds)

    def _progress(self) -> int:
        if self._fired or not self.expired():
            return 0
        self._fired = True
        return 1  # Non-zero: SQLite stops the statement with "interrupted".

    @contextmanager
    def guarding(self, conn: sqlite3.Connection) -> Iterator[None]:
        """Run the block with SQLite work on ``conn`` aborted past the deadline; an
        interrupted statement, or a passed deadline, leaves as SearchTimeoutError."""
        conn.set_progress_handler(self._progress, PROGRESS_OPS)
        try:
            yield
        except sqlite3.OperationalError as exc:
            if is_interrupt(exc) and self._fired:
                raise timeout_error(self.seconds) from exc
            raise
        finally:
            conn.set_progress_handler(None, PROGRESS_OPS)
