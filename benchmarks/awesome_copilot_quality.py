"""File-level retrieval quality on real markdown: Rifflux against a naive pipeline.

    python -m benchmarks.awesome_copilot_quality                      # both halves
    python -m benchmarks.awesome_copilot_quality --split heldout      # the held-out half
    python -m benchmarks.awesome_copilot_quality --split tune --per-query
    python -m benchmarks.awesome_copilot_quality --heading-weight 0.5 --candidate-multiplier 6

The queries and their judged files are ``benchmarks/awesome_copilot_queries.jsonl`` (one
JSON object a line: ``id``, ``split`` "tune" or "heldout", ``style``, ``query`` and
``relevant``, a map of corpus-relative path to grade 1 or 2). A run is scored at file level:
each system's chunk ranking is reduced to the distinct files in rank order, and nDCG@10,
Recall@10 and MRR@10 are computed on those with the graded judgements (``rifflux.eval.metrics``).

Two systems, with the same ONNX embedder (MiniLM int8) and the same query-term rules
(``build_match_query``: word tokens, English stop words dropped, OR-ed):

- **rifflux**: the real product. The corpus is indexed by ``Indexer`` with the settings'
  chunker and searched through ``SearchService.search``, documents ranked exactly as
  ``rifflux eval`` ranks them (``rank_documents``: chunks searched 3 per wanted file,
  deeper while fewer than 10 distinct files come back; ``--chunks-read 10`` instead scores
  the files of one ``top_k=10`` search, what an agent reads). Ranking-only options
  (``--heading-weight``, ``--content-weight``, ``--path-weight``, ``--about-weight``,
  ``--candidate-multiplier``, ``--rrf-k``) reuse the same index.
- **naive**: built here. Paragraph chunks (split on blank lines, packed up to 1,200
  characters, no heading awareness), embedded as their bare text, a content-only FTS5
  ``porter unicode61`` table, exact cosine over all chunk vectors, and RRF (k=60) over the
  best 60 chunks of each side; lexical and semantic rank their own best 60 chunks.

Embedding is the cost (~2,600 tokens/s on 2 cores), so every vector is cached by the
sha256 of its input text in ``CACHE/vectors.sqlite`` and shared by every index variant:
a chunker change embeds only the chunks whose text changed. The Rifflux index lives in a
directory named after a hash of the chunker's source and the chunk-size settings, so a
chunker change gets a fresh index without re-embedding what it did not change.

By default the corpus is a fixed subset: every judged file plus the first ``--distractors``
other files of the corpus ordered by sha256 of their path (100 by default; ``--full`` for all
1,727). The subset is copied under ``CACHE/corpus`` and kept in step on every run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import DEFAULT_CORPUS, REPO, emit, emit_machine
from rifflux.config import Settings
from rifflux.embed.base import Embedder
from rifflux.embed.hashing import HashEmbedder
from rifflux.embed.onnx import OnnxEmbedder
from rifflux.embed.torch_minilm import TorchEmbedder
from rifflux.eval.metrics import mean, mrr_at_k, ndcg_at_k, recall_at_k
from rifflux.eval.runner import rank_documents
from rifflux.index.indexer import Indexer
from rifflux.logs import configure_logging
from rifflux.search.fusion import rrf_fuse
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions
from rifflux.search.query import build_match_query
from rifflux.search.service import SearchService
from rifflux.status import index_counts

DEFAULT_QUERIES = REPO / "benchmarks" / "awesome_copilot_queries.jsonl"
DEFAULT_CACHE = Path.home() / ".cache" / "rifflux" / "awesome-copilot-quality"
MODES = ("lexical", "semantic", "hybrid")
SPLITS = ("tune", "heldout")
CUTOFF = 10
DEFAULT_DISTRACTORS = 100
# The naive pipeline's parameters (the description of it).
NAIVE_CHUNK_CHARS = 1200
NAIVE_CANDIDATES = 60
NAIVE_RRF_K = 60

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


# -- the query set --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    qid: str
    split: str
    style: str
    text: str
    relevant: dict[str, int]


def load_queries(path: Path) -> list[Query]:
    queries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            relevant = {str(p): int(g) for p, g in row["relevant"].items()}
            queries.append(Query(row["id"], row["split"], row["style"], row["query"], relevant))
    return queries


def judged_files(queries: Iterable[Query]) -> set[str]:
    return {path for query in queries for path in query.relevant}


# -- the corpus subset ----------------------------------------------------------------


def corpus_files(corpus: Path) -> list[str]:
    return sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*.md") if p.is_file())


def subset_files(all_files: Sequence[str], judged: set[str], distractors: int | None) -> list[str]:
    """Every judged file plus the first ``distractors`` others by sha256 of the path."""
    if distractors is None:
        return sorted(all_files)
    others = sorted(
        (p for p in all_files if p not in judged),
        key=lambda p: hashlib.sha256(p.encode("utf-8")).hexdigest(),
    )
    return sorted(judged | set(others[:distractors]))


def prepare_corpus(
    args: argparse.Namespace,
) -> tuple[list[Query], list[str], list[str], Path, Path]:
    """The queries, every corpus file, the files under test (all, or the judged ones plus
    distractors), the cache folder of that file set, and its copy of the corpus."""
    all_files = corpus_files(args.corpus)
    present = set(all_files)
    # A part of the corpus (the vendored sample) answers only the queries it holds.
    queries = [q for q in load_queries(args.queries) if set(q.relevant) <= present]
    files = subset_files(all_files, judged_files(queries), None if args.full else args.distractors)
    cache = args.cache_dir / ("full" if args.full else f"subset-{args.distractors}")
    root = cache / "corpus"
    sync_copy(args.corpus, files, root)
    return queries, all_files, files, cache, root


def sync_copy(corpus: Path, files: Sequence[str], dest: Path) -> None:
    """Make ``dest`` hold exactly ``files`` of ``corpus`` (copied, then left alone)."""
    wanted = set(files)
    if dest.is_dir():
        for path in sorted(dest.rglob("*.md")):
            if path.relative_to(dest).as_posix() not in wanted:
                path.unlink()
    for rel in files:
        target = dest / rel
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(corpus / rel, target)


# -- embedding, cached by text ----------------------------------------------------------


class CachedEmbedder:
    """An embedder whose vectors are remembered on disk by the sha256 of their text.

    Safe to call from any thread: a hybrid search embeds its query beside the lexical
    half, on another thread; one lock serialises the cache's connection."""

    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner = inner
        self.label = inner.label
        self.dim = inner.dim
        self.embedded = 0
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (label TEXT, sha TEXT, vec BLOB, "
            "PRIMARY KEY (label, sha))"
        )

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return self._embed_batch(texts)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        shas = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        missing: dict[str, str] = {}
        for row, sha in enumerate(shas):
            found = self._db.execute(
                "SELECT vec FROM vectors WHERE label = ? AND sha = ?", (self.label, sha)
            ).fetchone()
            if found is None:
                missing.setdefault(sha, texts[row])
            else:
                out[row] = np.frombuffer(found[0], dtype=np.float32)
        if missing:
            matrix = self.inner.embed_batch(list(missing.values()))
            fresh = dict(zip(missing, matrix, strict=True))
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                    [
                        (self.label, sha, vec.astype(np.float32).tobytes())
                        for sha, vec in fresh.items()
                    ],
                )
            self.embedded += len(fresh)
            for row, sha in enumerate(shas):
                if sha in fresh:
                    out[row] = fresh[sha]
        return out


# -- the naive pipeline ---------------------------------------------------------------


def paragraph_chunks(text: str, limit: int = NAIVE_CHUNK_CHARS) -> list[str]:
    """Blank-line paragraphs packed greedily up to ``limit``; longer ones cut at spaces."""
    pieces: list[str] = []
    for paragraph in _PARAGRAPH_BREAK.split(text.replace("\r\n", "\n")):
        paragraph = paragraph.strip()
        while len(paragraph) > limit:
            cut = paragraph.rfind(" ", 0, limit + 1)
            cut = cut if cut > 0 else limit
            pieces.append(paragraph[:cut].strip())
            paragraph = paragraph[cut:].strip()
        if paragraph:
            pieces.append(paragraph)
    chunks: list[str] = []
    for piece in pieces:
        if chunks and len(chunks[-1]) + 2 + len(piece) <= limit:
            chunks[-1] += "\n\n" + piece
        else:
            chunks.append(piece)
    return chunks


class NaivePipeline:
    """Paragraph chunks, a content-only FTS5 porter table, exact cosine, RRF over 60 + 60."""

    def __init__(self, root: Path, files: Sequence[str], embedder: Embedder) -> None:
        self.embedder = embedder
        self.paths: list[str] = []
        texts: list[str] = []
        for rel in files:
            for chunk in paragraph_chunks(
                (root / rel).read_text(encoding="utf-8", errors="replace")
            ):
                self.paths.append(rel)
                texts.append(chunk)
        self.db = sqlite3.connect(":memory:")
        self.db.execute(
            "CREATE VIRTUAL TABLE chunks USING fts5(content, tokenize='porter unicode61')"
        )
        with self.db:
            self.db.executemany(
                "INSERT INTO chunks(rowid, content) VALUES (?, ?)", enumerate(texts)
            )
        self.vectors = embedder.embed_batch(texts)

    @property
    def chunk_count(self) -> int:
        return len(self.paths)

    def lexical(self, query: str) -> list[int]:
        match = build_match_query(query)
        if match is None:
            return []
        rows = self.db.execute(
            "SELECT rowid FROM chunks WHERE chunks MATCH ? ORDER BY bm25(chunks), rowid LIMIT ?",
            (match, NAIVE_CANDIDATES),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def semantic(self, query: str) -> list[int]:
        scores = self.vectors @ self.embedder.embed_batch([query])[0]
        order = np.lexsort((np.arange(len(scores)), -scores))[:NAIVE_CANDIDATES]
        return [int(i) for i in order]

    def rank_files(self, query: str, mode: str, chunks_read: int | None = None) -> list[str]:
        """Distinct files of the ranked chunks (only the best ``chunks_read`` when given)."""
        if mode == "lexical":
            chunks = self.lexical(query)
        elif mode == "semantic":
            chunks = self.semantic(query)
        else:
            fused = rrf_fuse(self.lexical(query), self.semantic(query), k=NAIVE_RRF_K)
            chunks = [hit.key for hit in fused]
        return list(dict.fromkeys(self.paths[c] for c in chunks[:chunks_read]))[:CUTOFF]


# -- Rifflux --------------------------------------------------------------------------


def chunker_fingerprint(settings: Settings) -> str:
    """Names a Rifflux index by everything that decides its chunks and embedding inputs."""
    digest = hashlib.sha256()
    for module in ("chunker.py", "prepare.py", "frontmatter.py"):
        digest.update((REPO / "rifflux" / "index" / module).read_bytes())
    digest.update(f"{settings.max_chunk_chars}/{settings.min_chunk_chars}".encode())
    return digest.hexdigest()[:12]


def rifflux_service(
    root: Path, cache: Path, embedder: Embedder, args: argparse.Namespace
) -> tuple[SearchService, dict[str, Any]]:
    base = Settings.from_env().with_overrides(
        max_chunk_chars=args.max_chars, min_chunk_chars=args.min_chars
    )
    index_dir = cache / f"rifflux-{chunker_fingerprint(base)}"
    index_dir.mkdir(parents=True, exist_ok=True)
    settings = base.with_overrides(
        db_path=index_dir / "index.db",
        base_dir=root,
        embedding_backend=args.backend,
        candidate_multiplier=args.candidate_multiplier,
        rrf_k=args.rrf_k,
    )
    report = Indexer(settings, embedder=embedder).run([root])
    lexical = LexicalOptions(
        heading_weight=args.heading_weight,
        content_weight=args.content_weight,
        path_weight=args.path_weight,
        about_weight=args.about_weight,
    )
    service = SearchService(settings, embedder=embedder, lexical=lexical)
    counts = index_counts(service)
    return service, {
        "index": str(index_dir),
        "chunks": counts.get("chunks"),
        "files_indexed_now": report.files_indexed,
        "index_s": report.duration_s,
    }


# -- scoring --------------------------------------------------------------------------

Ranker = Callable[[str], list[str]]


def score(queries: Sequence[Query], ranker: Ranker) -> dict[str, Any]:
    per_query = {}
    for query in queries:
        ranked = ranker(query.text)
        per_query[query.qid] = {
            "ndcg": ndcg_at_k(ranked, query.relevant, CUTOFF),
            "recall": recall_at_k(ranked, query.relevant, CUTOFF),
            "mrr": mrr_at_k(ranked, query.relevant, CUTOFF),
            "ranked": ranked,
        }
    return {
        metric: mean([row[metric] for row in per_query.values()])
        for metric in ("ndcg", "recall", "mrr")
    } | {"per_query": per_query}


OPTION_NAMES = (
    "max_chars",
    "min_chars",
    "heading_weight",
    "content_weight",
    "path_weight",
    "about_weight",
    "candidate_multiplier",
    "rrf_k",
)


def emit_scores(results: dict[str, dict[str, dict[str, Any]]], split: str, count: int) -> None:
    """One line per system and mode: file-level nDCG@10, Recall@10 and MRR@10."""
    for system, modes in results.items():
        for mode in MODES:
            emit(
                "file_level_quality",
                split=split,
                queries=count,
                system=system,
                mode=mode,
                **{k: round(modes[mode][k], 3) for k in ("ndcg", "recall", "mrr")},
            )


def print_per_query(
    queries: Sequence[Query], results: dict[str, dict[str, dict[str, Any]]], mode: str
) -> None:
    print(f"\n### per query, {mode}: rifflux − naive nDCG@10 (losses first)")
    rows = []
    for query in queries:
        ours = results["rifflux"][mode]["per_query"][query.qid]
        theirs = results["naive"][mode]["per_query"][query.qid]
        rows.append((ours["ndcg"] - theirs["ndcg"], query, ours, theirs))
    rows.sort(key=lambda r: r[0])
    for delta, query, ours, theirs in rows:
        if abs(delta) < 1e-9:
            continue
        print(f"{delta:+.3f} {query.qid} [{query.style}] {query.text!r}")
        print(f"    relevant: {query.relevant}")
        print(f"    rifflux {ours['ndcg']:.3f}: {ours['ranked'][:5]}")
        print(f"    naive   {theirs['ndcg']:.3f}: {theirs['ranked'][:5]}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--queries", type=Path, default=DEFAULT_QUERIES)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--split", choices=(*SPLITS, "all"), default="all")
    parser.add_argument("--distractors", type=int, default=DEFAULT_DISTRACTORS)
    parser.add_argument("--full", action="store_true", help="index the whole corpus")
    parser.add_argument("--systems", nargs="+", choices=("rifflux", "naive"), default=None)
    parser.add_argument("--per-query", action="store_true", help="list per-query differences")
    parser.add_argument(
        "--backend",
        choices=("onnx", "hash", "torch"),
        default="onnx",
        help="torch: the GPU worker's embedder, on the CPU (give it a --cache-dir of its own)",
    )
    settings = Settings()
    parser.add_argument("--max-chars", type=int, default=settings.max_chunk_chars)
    parser.add_argument("--min-chars", type=int, default=settings.min_chunk_chars)
    parser.add_argument("--heading-weight", type=float, default=DEFAULT_OPTIONS.heading_weight)
    parser.add_argument("--content-weight", type=float, default=DEFAULT_OPTIONS.content_weight)
    parser.add_argument("--path-weight", type=float, default=DEFAULT_OPTIONS.path_weight)
    parser.add_argument("--about-weight", type=float, default=DEFAULT_OPTIONS.about_weight)
    parser.add_argument("--candidate-multiplier", type=int, default=settings.candidate_multiplier)
    parser.add_argument("--rrf-k", type=int, default=settings.rrf_k)
    parser.add_argument(
        "--chunks-read",
        type=int,
        help="score the distinct files of only the best N chunks, as an agent reading one "
        "search of top_k=N sees them (default: search deep enough for 10 distinct files)",
    )
    parser.add_argument("--json", type=Path, help="also write the full results here")
    args = parser.parse_args(argv)
    systems = args.systems or ["rifflux", "naive"]
    configure_logging("WARNING")

    if not args.corpus.is_dir():
        sys.exit(f"corpus not found: {args.corpus} (benchmarks read ../shared beside the repo)")
    queries, all_files, files, cache, root = prepare_corpus(args)
    inner: Embedder = HashEmbedder()
    if args.backend == "onnx":
        inner = OnnxEmbedder()
    elif args.backend == "torch":
        inner = TorchEmbedder("cpu", batch_size=32, token_budget=256, threads=1)
    embedder = CachedEmbedder(inner, args.cache_dir / "vectors.sqlite")
    emit_machine(
        corpus=str(args.corpus),
        files=len(files),
        corpus_files=len(all_files),
        queries={s: sum(q.split == s for q in queries) for s in SPLITS},
        backend=args.backend,
        options={name: getattr(args, name) for name in OPTION_NAMES},
    )

    rankers: dict[str, dict[str, Ranker]] = {}
    info: dict[str, Any] = {}
    if "rifflux" in systems:
        started = time.perf_counter()
        service, info["rifflux"] = rifflux_service(root, cache, embedder, args)
        doc_of_path = {path: path for path in files}

        def rifflux_ranker(mode: str) -> Ranker:
            def search(query: str, n: int) -> list[str]:
                return [hit["path"] for hit in service.search(query, top_k=n, mode=mode)]

            if args.chunks_read is not None:
                return lambda text: list(dict.fromkeys(search(text, args.chunks_read)))
            return lambda text: rank_documents(search, text, doc_of_path, CUTOFF)

        rankers["rifflux"] = {mode: rifflux_ranker(mode) for mode in MODES}
        emit("rifflux_index", seconds=round(time.perf_counter() - started), **info["rifflux"])
    if "naive" in systems:
        started = time.perf_counter()
        naive = NaivePipeline(root, files, embedder)
        rankers["naive"] = {
            mode: (lambda text, mode=mode: naive.rank_files(text, mode, args.chunks_read))
            for mode in MODES
        }
        info["naive"] = {"chunks": naive.chunk_count}
        emit("naive_index", chunks=naive.chunk_count, seconds=round(time.perf_counter() - started))
    emit("embedded", vectors=embedder.embedded)

    splits = SPLITS if args.split == "all" else (args.split,)
    output: dict[str, Any] = {"info": info, "splits": {}}
    for split in splits:
        chosen = [q for q in queries if q.split == split]
        results = {
            system: {mode: score(chosen, ranker) for mode, ranker in by_mode.items()}
            for system, by_mode in rankers.items()
        }
        output["splits"][split] = results
        emit_scores(results, split, len(chosen))
        if args.per_query and len(rankers) == 2:
            for mode in ("lexical", "hybrid"):
                print_per_query(chosen, results, mode)
    if args.json:
        args.json.write_text(json.dumps(output, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
