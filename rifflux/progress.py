"""A one-line ``done/total`` progress display on a terminal; silent when not a terminal."""

from __future__ import annotations

import time
from typing import TextIO


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
