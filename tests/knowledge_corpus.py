"""The judged knowledge corpus ``tests/corpus/knowledge`` and the scoring of the document
kind rules on it.

``expected.json`` holds each file's judged kind, the heading paths of its error-solution
sections and a decision's status and date. ``detect`` runs a file through the indexer's
own ``chunk_file`` (front matter, chunking, kinds); ``evaluate`` scores the detected kinds
per kind at file level (precision, recall), error sections by heading path, and decision
fields by exact match. The ``heldout/`` files were written and judged after the rules
were fixed on the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rifflux.config import Settings
from rifflux.index.changes import FileWork
from rifflux.index.prepare import chunk_file
from rifflux.store.rows import KINDS, FileKnowledge

CORPUS = Path(__file__).resolve().parent / "corpus" / "knowledge"
DECISION_FIELDS = ("status", "date", "decision_type")


def detect(root: Path, rel_path: str) -> FileKnowledge:
    """The knowledge row the indexer would store for ``root/rel_path``."""
    settings = Settings()
    text = (root / rel_path).read_text(encoding="utf-8", errors="replace")
    work = FileWork(rel_path, 0, len(text), "", text)
    prepared = chunk_file(
        work, max_chars=settings.max_chunk_chars, min_chars=settings.min_chunk_chars
    )
    assert prepared.knowledge is not None
    return prepared.knowledge


def load_expected(root: Path = CORPUS) -> dict[str, dict[str, object]]:
    expected = json.loads((root / "expected.json").read_text(encoding="utf-8"))
    return {path: judged for path, judged in expected.items() if not path.startswith("_")}


@dataclass
class Score:
    """Counts for precision and recall."""

    hits: int = 0
    found: int = 0
    wanted: int = 0

    @property
    def precision(self) -> float:
        return self.hits / self.found if self.found else 1.0

    @property
    def recall(self) -> float:
        return self.hits / self.wanted if self.wanted else 1.0


@dataclass
class Report:
    files: int = 0
    kinds: dict[str, Score] = field(default_factory=lambda: {kind: Score() for kind in KINDS})
    sections: Score = field(default_factory=Score)
    fields_right: int = 0
    fields_judged: int = 0
    mistakes: list[str] = field(default_factory=list)


def evaluate(root: Path, expected: dict[str, dict[str, object]], paths: Iterable[str]) -> Report:
    """Score the rules on ``paths`` of the judged corpus."""
    report = Report()
    for path in sorted(paths):
        judged = expected[path]
        found = detect(root, path)
        report.files += 1
        want_kind = str(judged["kind"])
        report.kinds[want_kind].wanted += 1
        report.kinds[found.kind].found += 1
        if found.kind == want_kind:
            report.kinds[want_kind].hits += 1
        else:
            report.mistakes.append(f"{path}: {found.kind}, expected {want_kind}")
        want_sections = {str(s) for s in judged.get("errors", [])}  # type: ignore[attr-defined]
        found_sections = {e.heading_path for e in found.errors}
        report.sections.wanted += len(want_sections)
        report.sections.found += len(found_sections)
        report.sections.hits += len(want_sections & found_sections)
        for extra in sorted(found_sections - want_sections):
            report.mistakes.append(f"{path}: unexpected error section {extra!r}")
        for missed in sorted(want_sections - found_sections):
            report.mistakes.append(f"{path}: missed error section {missed!r}")
        for name in DECISION_FIELDS:
            if name in judged:
                report.fields_judged += 1
                value = getattr(found, name)
                if value == judged[name]:
                    report.fields_right += 1
                else:
                    report.mistakes.append(f"{path}: {name} {value!r}, expected {judged[name]!r}")
    return report
