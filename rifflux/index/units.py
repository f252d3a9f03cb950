"""Embed units sized to the pool: how a chunked batch's texts go out to be embedded.

A job's batches are cut by bytes (:mod:`rifflux.index.planner`), which suits the chunk
step and its write transaction; embedding is the long step, and a pool of W workers
keeps every worker busy only while at least W embed units wait. A batch's texts are
therefore split into ``units_for(...)`` units, so that the job has about
``UNITS_PER_WORKER`` units per live embedding worker: the pool pulls them one at a time
(a worker holds no unit it is not running, ``workers/child.py``), so until fewer than W
units remain none idles, and the last wave is a fraction of a batch, not a whole one.
A pool of two, whose jobs have ``MIN_BATCHES`` batches or more, keeps one unit a batch:
its messages and transactions stay as they were.

A unit holds at least ``MIN_UNIT_TEXTS`` texts (the embedder batches what it gets, and
each unit is one embed message and one vector write) and a batch at most ``MAX_UNITS``
units (each is a bit of the batch's ``units_done``). The job's last batches (the last
``1 / TAIL_FRACTION`` of them, at least one), whose units are the last the pool embeds,
go out as twice as many units of at least ``TAIL_MIN_UNIT_TEXTS`` texts: the pool's last
wave is shorter, so fewer workers idle while the slowest finish. Texts are dealt longest
first, round robin, so the units of a batch hold equal counts (±1) and about equal
lengths.
"""

from __future__ import annotations

from collections.abc import Sequence

UNITS_PER_WORKER = 8
MIN_UNIT_TEXTS = 8
MAX_UNITS = 62
TAIL_FRACTION = 8
TAIL_MIN_UNIT_TEXTS = 4


def units_for(texts: int, batches: int, workers: int, batch_no: int | None = None) -> int:
    """How many embed units a batch of ``texts`` texts goes out as, in a job of
    ``batches`` batches embedded by ``workers`` live workers; ``batch_no`` (0-based, in
    plan order) tells a batch of the job's tail."""
    if workers <= 1:
        return 1  # One worker embeds the job's texts one after another in any case.
    wanted = -(-UNITS_PER_WORKER * workers // max(1, batches))
    if batch_no is not None and batch_no >= batches - max(1, batches // TAIL_FRACTION):
        return max(1, min(2 * wanted, texts // TAIL_MIN_UNIT_TEXTS, MAX_UNITS))
    return max(1, min(wanted, texts // MIN_UNIT_TEXTS, MAX_UNITS))


def deal(texts: Sequence[tuple[str, str]], units: int) -> list[tuple[tuple[str, str], ...]]:
    """``(key, text)`` pairs split into ``units`` lists, longest text first, round robin:
    counts differ by at most one, and so do the lists' shares of every length. No list
    is empty unless there are fewer texts than units."""
    units = max(1, min(units, len(texts))) if texts else 1
    ordered = sorted(texts, key=lambda pair: (-len(pair[1]), pair[0]))
    return [tuple(ordered[n::units]) for n in range(units)]
