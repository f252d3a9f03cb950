"""grep_rifflux against ripgrep on the same files: p50 latency, identical lines, index cost.

Indexes the corpus in-process (hash embedder), alternately as shipped and with the grep
rows (rifflux.store.grep_text) switched off, ``--index-runs`` times each, and reports for
the run of least CPU of each the full-index wall and CPU time, the database bytes after
a WAL checkpoint, their ratio to the corpus text bytes and the bytes of the grep tables.
Then samples patterns (seeded) from the text of ``--sample-files`` random files, counting
their matches over the whole corpus with rg (one ``--only-matching`` run for every
literal candidate): literals of 6 to 24 characters matching at most 100 lines
(selective), regexes with a required literal matching at most 100 lines, and as many
regexes matching any number of lines (checked, not timed); times
each ``grep_rifflux`` call through a stdio MCP session against ``rg`` over the same files
(``--fixed-strings`` for the literals; both case-insensitive, grep_rifflux's default;
warm page cache: every command runs once before timing), and checks that both report the
same (path, line) pairs for every sampled pattern, case-sensitive and not. Needs ``rg``
on PATH (Debian: ``apt-get install ripgrep``).

    nice -n 10 .venv/bin/python -m benchmarks.grep_vs_rg \\
        --corpus ../shared/corpora/awesome-copilot --workdir /tmp/bench-grep --out grep.json
    nice -n 10 .venv/bin/python -m benchmarks.grep_vs_rg --generate 10000 \\
        --workdir /tmp/bench-grep-10k --literals 50 --regexes 20 --out grep-10k.json
    nice -n 10 .venv/bin/python -m benchmarks.grep_vs_rg --generate 100000 \\
        --workdir /tmp/bench-grep-100k --reuse-index --literals 50 --regexes 20 \\
        --rounds 1 --insensitive-only --out grep-100k.json
    nice -n 10 .venv/bin/python -m benchmarks.grep_vs_rg --embedder onnx --files 200 \\
        --index-only --workdir /tmp/bench-grep-onnx
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

import rifflux
from benchmarks.corpus_sample import copy_files
from benchmarks.harness import DEFAULT_CORPUS, machine
from benchmarks.scale_corpus import generate
from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.store import grep_text

GREP_TABLES = ("grep_",)
# Regex shapes over sampled words, in RE2 and Rust regex alike (no \w, \s, \d, \b: their
# Unicode reach differs between the two engines).
REGEX_TEMPLATES = (
    "{a}.*{b}",
    "({a}|{b})",
    "{a}[ \t]*[:=(]",
    "^[ \t]*[-*] .*{a}",
    "{a}(ing|ed|s)?[^A-Za-z]",
    "`[^`]*{a}[^`]*`",
    "[A-Z]{a1}",
    "{a}[0-9]+",
)


def indexed_paths(db: Path) -> list[str]:
    """The stored paths of the indexed files."""
    conn = sqlite3.connect(db)
    paths = [str(r[0]) for r in conn.execute("SELECT path FROM files ORDER BY path")]
    conn.close()
    return paths


TEMPLATE_MISSES = 3
"""Unselective regexes of one template in a row after which the sampler takes the next
(on 100k generated files an alternation of two common words never matches ≤ 100 lines)."""


def text_files(corpus: Path, paths: list[str], count: int, seed: int) -> dict[str, list[str]]:
    """``count`` of the indexed files, drawn at random: stored path → lines, as the
    indexer reads them. Patterns are sampled from these; rg counts their matches over
    every file (reading the whole corpus into Python would not fit a 100k-file run)."""
    files = {}
    for path in sorted(random.Random(seed).sample(paths, min(count, len(paths)))):
        text = (corpus / path).read_bytes().decode("utf-8", "replace").removeprefix("\ufeff")
        text = re.sub(r"\r\n?", "\n", text)
        lines = text.split("\n")
        files[path] = lines[:-1] if text.endswith("\n") else lines
    return files


def index(corpus: Path, db: Path, *, with_grep: bool, embedder: str = "hash") -> dict[str, Any]:
    if db.exists():
        db.unlink()
    shutil.rmtree(f"{db}.vectors", ignore_errors=True)
    settings = Settings(db_path=db, base_dir=corpus, embedding_backend=embedder)
    original = grep_text.has_grep
    if not with_grep:
        grep_text.has_grep = lambda conn: False  # type: ignore[assignment]
    try:
        cpu = cpu_seconds()
        started = time.perf_counter()
        Indexer(settings).run([corpus])
        seconds = time.perf_counter() - started
        cpu = cpu_seconds() - cpu
    finally:
        grep_text.has_grep = original  # type: ignore[assignment]
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    sizes = dict(conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())
    conn.close()
    grep_bytes = sum(v for k, v in sizes.items() if k.startswith(GREP_TABLES))
    return {
        "index_s": round(seconds, 2),
        "index_cpu_s": round(cpu, 2),
        "db_bytes": db.stat().st_size,
        "grep_bytes": grep_bytes,
    }


def cpu_seconds() -> float:
    """User + system CPU of this process's threads and its waited-for children."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of least CPU (the machine is shared: wall time varies with its load)."""
    return {**min(runs, key=lambda r: r["index_cpu_s"]), "runs": len(runs)}


def sample_literals(files: dict[str, list[str]], corpus: Path, count: int, seed: int) -> list[str]:
    """Literals of 6 to 24 characters cut from the sampled files' lines, each matching
    at most 100 lines of the corpus, case aside (selective): candidates counted by one
    ``rg --only-matching`` over every file."""
    rng = random.Random(seed)
    paths = sorted(files)
    candidates: list[str] = []
    for _ in range(count * 100):
        if len(candidates) >= 4 * count:
            break
        lines = [line for line in files[rng.choice(paths)] if len(line.strip()) >= 12]
        if not lines:
            continue
        line = rng.choice(lines)
        size = rng.randint(6, 24)
        start = rng.randrange(0, max(1, len(line) - size))
        literal = line[start : start + size]
        if len(literal) < 6 or not literal.strip() or literal in candidates:
            continue
        candidates.append(literal)
    lines_of = rg_lines_per_literal(corpus, candidates)
    return [c for c in candidates if lines_of.get(c.lower(), 0) <= 100][:count]


def rg_lines_per_literal(corpus: Path, literals: list[str]) -> dict[str, int]:
    """Matching lines of each literal (lower-cased) over the corpus, case aside, from one
    rg run reporting each match (a literal hidden behind another matching at the same
    place is undercounted: the check against rg per pattern is exact)."""
    patterns = corpus.parent / f".{corpus.name}-literals.txt"
    patterns.write_text("".join(literal + "\n" for literal in literals))
    try:
        args = [*RG, "--fixed-strings", "--ignore-case", "--only-matching", "-f", str(patterns)]
        out = subprocess.run(
            [*args, "."], cwd=corpus, capture_output=True, check=False
        ).stdout.decode("utf-8", "replace")
    finally:
        patterns.unlink()
    seen: dict[str, set[str]] = {}
    for row in out.splitlines():
        path, number, text = row.split(":", 2)
        seen.setdefault(text.lower(), set()).add(path + ":" + number)
    return {text: len(where) for text, where in seen.items()}


def sample_regexes(
    files: dict[str, list[str]], corpus: Path, count: int, seed: int, *, selective: bool
) -> list[str]:
    """Regexes over sampled words; ``selective``: only those matching at most 100 lines
    (counted by rg)."""
    rng = random.Random(seed)
    paths = sorted(files)
    found: list[str] = []
    skipped, misses = 0, 0  # templates given up on; misses of the current one in a row
    for _ in range(count * 100):
        if len(found) >= count:
            break
        words = [w for line in files[rng.choice(paths)] for w in re.findall("[A-Za-z]{5,}", line)]
        if len(words) < 2:
            continue
        a, b = rng.choice(words), rng.choice(words)
        if misses >= TEMPLATE_MISSES:
            skipped, misses = skipped + 1, 0
        template = REGEX_TEMPLATES[(len(found) + skipped) % len(REGEX_TEMPLATES)]
        pattern = template.format(a=a, b=b, a1=a[1:])
        if pattern in found:
            continue
        if selective and rg_line_count(corpus, pattern) > 100:
            misses += 1
            continue
        misses = 0
        found.append(pattern)
    return found


RG = ["rg", "--no-config", "--no-ignore", "--hidden", "-g", "*.md", "--line-number"]
RG += ["--no-heading", "--with-filename", "--color", "never", "--no-messages"]


def rg_lines(corpus: Path, pattern: str, *, regex: bool, case_sensitive: bool) -> list[list[Any]]:
    args = list(RG)
    args += [] if regex else ["--fixed-strings"]
    args += [] if case_sensitive else ["--ignore-case"]
    out = subprocess.run(
        [*args, "-e", pattern, "."], cwd=corpus, capture_output=True, check=False
    ).stdout.decode("utf-8", "replace")
    pairs = []
    for line in out.splitlines():
        path, number, _ = line.split(":", 2)
        pairs.append([path.removeprefix("./"), int(number)])
    return sorted(pairs)


def rg_line_count(corpus: Path, pattern: str) -> int:
    """Lines matching the regex ``pattern`` over the corpus, case aside (rg --count)."""
    out = subprocess.run(
        [*RG, "--count", "--ignore-case", "-e", pattern, "."],
        cwd=corpus,
        capture_output=True,
        check=False,
    ).stdout.decode("utf-8", "replace")
    return sum(int(row.rsplit(":", 1)[1]) for row in out.splitlines())


def rg_seconds(corpus: Path, pattern: str, *, regex: bool) -> float:
    args = ["rg", "--no-config", "--no-ignore", "--hidden", "-g", "*.md", "--line-number"]
    args += ["--column", "--ignore-case", "--color", "never"]
    args += [] if regex else ["--fixed-strings"]
    started = time.perf_counter()
    subprocess.run([*args, "-e", pattern, "."], cwd=corpus, capture_output=True, check=False)
    return time.perf_counter() - started


def p50(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


async def measure(
    corpus: Path,
    db: Path,
    literals: list[str],
    regexes: list[str],
    broad: list[str],
    rounds: int,
    cases: tuple[bool, ...] = (False, True),
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
    env.update(
        RIFFLUX_DB_PATH=str(db),
        RIFFLUX_EMBEDDING_BACKEND="hash",
        RIFFLUX_BASE_DIR=str(corpus),
        RIFFLUX_ALLOWED_ROOTS=str(corpus),
        RIFFLUX_LOG_LEVEL="WARNING",
    )
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rifflux.mcp", "--transport", "stdio"], env=env
    )
    out: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        async def call(pattern: str, **options: Any) -> dict[str, Any]:
            result = await session.call_tool(
                "grep_rifflux", {"pattern": pattern, "max_matches": 1000, **options}
            )
            assert not result.is_error, result.content
            assert result.structured_content is not None
            return result.structured_content

        # Identical lines: every sampled pattern, case-insensitive and case-sensitive.
        mismatches = []
        for regex, patterns in ((False, literals), (True, regexes), (True, broad)):
            for pattern in patterns:
                for case_sensitive in cases:
                    got = await call(pattern, regex=regex, case_sensitive=case_sensitive)
                    mine = sorted([m["path"], m["line"]] for m in got["matches"])
                    theirs = rg_lines(corpus, pattern, regex=regex, case_sensitive=case_sensitive)
                    if got["truncated"]:
                        theirs = theirs[: len(mine)]
                    if mine != theirs:
                        mismatches.append(
                            {
                                "pattern": pattern,
                                "regex": regex,
                                "case": case_sensitive,
                                "rifflux": len(mine),
                                "rg": len(theirs),
                            }
                        )
        out["checked_patterns"] = len(cases) * (len(literals) + len(regexes) + len(broad))
        out["mismatches"] = mismatches
        # Latency, warm: each command once first, then ``rounds`` timed runs of each.
        for name, regex, patterns in (
            ("literal", False, literals),
            ("regex_selective", True, regexes),
        ):
            mine, theirs = [], []
            for pattern in patterns:
                await call(pattern, regex=regex)
                rg_seconds(corpus, pattern, regex=regex)
            for _ in range(rounds):
                for pattern in patterns:
                    started = time.perf_counter()
                    await call(pattern, regex=regex)
                    mine.append(time.perf_counter() - started)
                    theirs.append(rg_seconds(corpus, pattern, regex=regex))
            out[name] = {
                "patterns": len(patterns),
                "grep_rifflux_p50_ms": p50(mine),
                "rg_p50_ms": p50(theirs),
                "speedup_p50": round(statistics.median(theirs) / statistics.median(mine), 1),
            }
        scans = ["->", r"^#{1,3} [A-Z]", r"[0-9]+\.[0-9]+"]
        mine = []
        for pattern in scans:
            got = await call(pattern, regex=pattern != "->")
            assert got["scanned"], pattern
            started = time.perf_counter()
            await call(pattern, regex=pattern != "->")
            mine.append(time.perf_counter() - started)
        out["scan_ms"] = {p: round(s * 1000, 1) for p, s in zip(scans, mine, strict=True)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument(
        "--generate",
        type=int,
        metavar="N",
        help="generate N files from --corpus's vocabulary (scale_corpus.py) into "
        "WORKDIR/corpus, once, and measure on them instead",
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-grep"))
    parser.add_argument("--literals", type=int, default=200)
    parser.add_argument("--regexes", type=int, default=50)
    parser.add_argument(
        "--broad-regexes",
        type=int,
        help="regexes matching any number of lines, checked (default: --regexes)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--sample-files", type=int, default=300, help="files the patterns are cut from"
    )
    parser.add_argument(
        "--insensitive-only",
        action="store_true",
        help="check the lines against rg case-insensitively only (half the rg runs)",
    )
    parser.add_argument("--index-runs", type=int, default=2, help="index runs per variant")
    parser.add_argument(
        "--embedder",
        choices=("hash", "onnx"),
        default="hash",
        help="the indexes' embedder (grep reads no vectors; onnx: the default's full cost)",
    )
    parser.add_argument(
        "--files", type=int, metavar="N", help="index only the first N files of the corpus"
    )
    parser.add_argument(
        "--index-only", action="store_true", help="report the index figures, search nothing"
    )
    parser.add_argument(
        "--reuse-index", action="store_true", help="search WORKDIR/with.db as it is"
    )
    parser.add_argument("--out", type=Path, help="write the JSON here too")
    args = parser.parse_args()
    if shutil.which("rg") is None:
        print("rg not found: apt-get install ripgrep", file=sys.stderr)
        return 1
    corpus = args.corpus.resolve()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.generate:
        generated = args.workdir / "corpus"
        if not generated.is_dir():
            generate(generated, args.generate, source=corpus)
        corpus = generated.resolve()
    if args.files:
        sliced = args.workdir / f"corpus-{args.files}"
        if not sliced.is_dir():
            copy_files(corpus, sliced, args.files)
        corpus = sliced.resolve()
    rg_version = subprocess.run(["rg", "--version"], capture_output=True, text=True).stdout
    out: dict[str, Any] = {
        "machine": machine(),
        "rifflux": rifflux.__file__,
        "rg": rg_version.splitlines()[0],
        "corpus": str(corpus),
    }
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for _ in range(args.index_runs if not args.reuse_index else 0):
        for grep_on in (False, True):
            name = "with.db" if grep_on else "without.db"
            db = args.workdir / name
            runs[grep_on].append(index(corpus, db, with_grep=grep_on, embedder=args.embedder))
    if args.reuse_index:
        out["index"] = "not measured (--reuse-index)"
    else:
        without, with_grep = best_of(runs[False]), best_of(runs[True])
    paths = indexed_paths(args.workdir / "with.db")
    text_bytes = sum((corpus / p).stat().st_size for p in paths)
    out["files"], out["text_bytes"] = len(paths), text_bytes
    files = text_files(corpus, paths, args.sample_files, seed=34)
    if not args.reuse_index:
        out["index"] = {
            "without_grep": {**without, "ratio": round(without["db_bytes"] / text_bytes, 2)},
            "with_grep": {**with_grep, "ratio": round(with_grep["db_bytes"] / text_bytes, 2)},
            "grep_tables_per_text_byte": round(with_grep["grep_bytes"] / text_bytes, 2),
            "index_cpu_increase": round(with_grep["index_cpu_s"] / without["index_cpu_s"] - 1, 3),
        }
    if args.index_only:
        out["runs"] = {"with_grep": runs[True], "without_grep": runs[False]}
        print(json.dumps(out, indent=1))
        return 0
    literals = sample_literals(files, corpus, args.literals, seed=35)
    regexes = sample_regexes(files, corpus, args.regexes, seed=36, selective=True)
    broad_count = args.regexes if args.broad_regexes is None else args.broad_regexes
    broad = sample_regexes(files, corpus, broad_count, seed=37, selective=False)
    print(
        f"sampled {len(literals)} literals, {len(regexes)} + {len(broad)} regexes", file=sys.stderr
    )
    db = args.workdir / "with.db"
    cases = (False,) if args.insensitive_only else (False, True)
    out.update(asyncio.run(measure(corpus, db, literals, regexes, broad, args.rounds, cases)))
    text = json.dumps(out, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
