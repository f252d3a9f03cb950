"""Precision and recall of the document kind rules (rifflux/index/kinds.py) on a judged corpus.

    python benchmarks/knowledge_kinds.py                      # tests/corpus/knowledge
    python benchmarks/knowledge_kinds.py --corpus DIR --survey # kinds found in any corpus

The judged corpus is ``tests/corpus/knowledge`` with ``expected.json`` (a kind per file,
the heading paths of its error-solution sections, a decision's status and date). Each
file goes through the indexer's own ``chunk_file`` (front matter split, chunking, kinds),
and the detected kinds are scored per kind at file level (precision, recall), error
sections at section level (by heading path), and decision fields by exact match. The
``heldout/`` files were written and judged after the rules were fixed on the others, so
both halves are reported.

``--survey`` runs the rules over another corpus (no judgements) and lists the files found
to be decisions or error pages, with their error signatures, to be read by a person.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rifflux.config import Settings
from rifflux.index.changes import FileWork
from rifflux.index.kinds import KNOWLEDGE_VERSION
from rifflux.index.prepare import chunk_file
from rifflux.store.rows import KINDS, FileKnowledge

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS = REPO_ROOT / "tests" / "corpus" / "knowledge"
HELDOUT = "heldout/"
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


def print_report(title: str, report: Report) -> None:
    print(f"\n## {title} ({report.files} files)")
    print("| kind | precision | recall | files |")
    print("|---|---|---|---|")
    for kind, score in report.kinds.items():
        print(f"| {kind} | {score.precision:.3f} | {score.recall:.3f} | {score.wanted} |")
    sections = report.sections
    print(
        f"| error sections | {sections.precision:.3f} | {sections.recall:.3f} | {sections.wanted} |"
    )
    print(f"decision fields right: {report.fields_right}/{report.fields_judged}")
    for mistake in report.mistakes:
        print(f"  - {mistake}")


def survey(root: Path) -> None:
    counts: Counter[str] = Counter()
    for file in sorted(root.rglob("*")):
        if not file.is_file() or file.suffix.lower() not in (".md", ".markdown", ".mdx", ".txt"):
            continue
        rel = file.relative_to(root).as_posix()
        found = detect(root, rel)
        counts[found.kind] += 1
        if found.kind != "note":
            print(f"{found.kind:8} {rel} {found.status}")
            for pair in found.errors:
                print(f"           {pair.signature[:100]}")
    print(dict(counts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--survey", action="store_true", help="list what the rules find")
    args = parser.parse_args(argv)
    print(f"rules: rifflux.index.kinds version {KNOWLEDGE_VERSION}; corpus: {args.corpus}")
    if args.survey:
        survey(args.corpus)
        return 0
    expected = load_expected(args.corpus)
    tuned = [p for p in expected if not p.startswith(HELDOUT)]
    heldout = [p for p in expected if p.startswith(HELDOUT)]
    print_report("written with the rules", evaluate(args.corpus, expected, tuned))
    print_report("held out", evaluate(args.corpus, expected, heldout))
    print_report("all", evaluate(args.corpus, expected, expected))
    return 0


if __name__ == "__main__":
    sys.exit(main())
