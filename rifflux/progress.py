"""Progress displays: a one-line ``done/total`` (``ProgressLine``, silent when not a
terminal) and one bar per phase of a reindex job (``PhaseProgress``, one line per phase
change when not a terminal)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class ProgressLine:
    WIDTH = 24

    def __init__(self, stream: TextIO, label: str, unit: str) -> None:
        self.stream = stream
        self.label = label
        self.unit = unit
        self.enabled = stream.isatty()
        self.started = time.monotonic()
        self.drawn = False

    def update(self, done: int, total: int, detail: str = "") -> None:
        if not self.enabled:
            return
        fraction = min(done / total, 1.0) if total > 0 else 1.0
        elapsed = max(time.monotonic() - self.started, 1e-6)
        eta = elapsed / fraction - elapsed if 0 < fraction < 1 else 0.0
        filled = int(fraction * self.WIDTH)
        line = (
            f"\r{self.label} [{'#' * filled}{'.' * (self.WIDTH - filled)}] "
            f"{done}/{total} {self.unit} · {done / elapsed:.1f}/s · ETA {eta:.0f}s"
        )
        if detail:
            line += f" · {detail}"
        self.stream.write(line.ljust(90))
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


# A job's phases as ``rifflux index`` shows them, in order, with their labels (one line
# per phase change) and the shorter bar labels that leave room for the counts.
PHASE_LABELS = {
    "scanning": "scanning",
    "lexical": "chunking and writing (keyword-searchable)",
    "embedding": "embedding",
}
BAR_LABELS = {"scanning": "scanning", "lexical": "chunk+write", "embedding": "embedding"}
# What each phase counts: its rate and ETA are in the units its work comes in. Embedding
# works through chunks (a file of 500 chunks is one file done only at its end).
PHASE_UNITS = {"scanning": "files", "lexical": "files", "embedding": "chunks"}


class _Rate(ProgressColumn):
    """Items per second, from rich's own speed estimate over recent updates."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.1f}/s" if speed else "")


class PhaseProgress:
    """One live bar per phase of a reindex job (rich), with counts, a rate and an ETA.

    ``update(phase, counts)`` takes the job's current phase and ``{phase: (done, total,
    detail)}``, each phase counted in its :data:`PHASE_UNITS`. On a terminal the bars
    redraw in place; otherwise each phase change prints one line (``rifflux: <phase>:
    <done>/<total> <unit> ...``), so a log shows when each phase began. Either way it
    writes to ``stream`` (stderr), never to stdout. ``clock``: seconds for the rates and
    ETAs (default rich's, ``time.monotonic``).
    """

    def __init__(self, stream: TextIO, clock: Callable[[], float] | None = None) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.last_phase: str | None = None
        self._tasks: dict[str, TaskID] = {}
        self._progress: Progress | None = None
        if self.live:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(bar_width=16),
                MofNCompleteColumn(),
                _Rate(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[detail]}"),
                console=Console(file=stream),
                transient=False,
                get_time=clock,
            )
            self._progress.start()

    def update(self, phase: str, counts: dict[str, tuple[int, int | None, str]]) -> None:
        if self._progress is not None:
            for name, label in BAR_LABELS.items():
                if name not in counts:
                    continue
                done, total, detail = counts[name]
                if name not in self._tasks:
                    self._tasks[name] = self._progress.add_task(
                        label, total=total, unit=PHASE_UNITS[name], detail=detail
                    )
                self._progress.update(self._tasks[name], completed=done, total=total, detail=detail)
        elif phase != self.last_phase:
            line = f"rifflux: {PHASE_LABELS.get(phase, phase)}"
            if phase in counts:
                done, total, detail = counts[phase]
                unit = PHASE_UNITS.get(phase, "files")
                line += f": {done}/{total if total is not None else '?'} {unit}"
                line += f" {detail}" if detail else ""
            print(line, file=self.stream, flush=True)
        self.last_phase = phase

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
