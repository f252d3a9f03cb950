"""BEIR-format datasets: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/*.tsv``.

The corpus is materialised as one markdown file per document (``# title`` then the
text) under ``docs/`` of a cache directory whose name is a hash of the corpus and of the
settings that shape the index (chunk sizes, embedder, embedding input), so a second run
finds the same files unchanged and reuses the index and its vectors.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rifflux.config import Settings
from rifflux.embed.factory import embedder_label_for
from rifflux.errors import RiffluxError
from rifflux.index import prepare

CACHE_ENV = "RIFFLUX_EVAL_CACHE_DIR"
DEFAULT_CACHE_ROOT = Path("~/.cache/rifflux/eval")
# Bump when the materialised layout changes, so old caches are not mistaken for new.
LAYOUT_VERSION = 1
DOCS_DIR = "docs"
DB_NAME = "index.db"
READY_MARKER = "docs.ready"
# File names stay well under the 255-byte limit of common filesystems.
MAX_NAME_BYTES = 180
_SAFE_NAME_CHAR = re.compile(r"[A-Za-z0-9_-]")
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Document:
    doc_id: str
    title: str
    text: str


def doc_file_name(doc_id: str) -> str:
    """A filesystem-safe, injective file name for ``doc_id``.

    Letters, digits, ``_`` and ``-`` are kept; every other character becomes ``%XX`` of
    its UTF-8 bytes (so ``/``, ``.``, ``%`` and spaces are safe). Over-long names are cut
    and suffixed with a hash of the id.
    """
    encoded = "".join(
        ch if _SAFE_NAME_CHAR.fullmatch(ch) else "".join(f"%{b:02X}" for b in ch.encode())
        for ch in doc_id
    )
    if len(encoded) > MAX_NAME_BYTES:
        digest = hashlib.sha256(doc_id.encode()).hexdigest()[:16]
        encoded = f"{encoded[: MAX_NAME_BYTES - 17]}~{digest}"
    return f"{encoded}.md"


def doc_rel_path(doc_id: str) -> str:
    """The document's path as the index stores it (relative to the cache directory)."""
    return f"{DOCS_DIR}/{doc_file_name(doc_id)}"


def doc_markdown(doc: Document) -> str:
    """The file written for ``doc``: its title as a level-1 heading, then its text."""
    title = _WHITESPACE.sub(" ", doc.title).strip()
    text = doc.text.strip()
    if not title:
        return f"{text}\n"
    return f"# {title}\n\n{text}\n" if text else f"# {title}\n"


def _read_jsonl(path: Path) -> Iterator[dict[str, object]]:
    if not path.is_file():
        raise RiffluxError(f"{path} not found: a BEIR dataset has corpus.jsonl and queries.jsonl")
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise RiffluxError(f"{path}:{number} is not valid JSON: {exc.msg}") from None


def iter_corpus(dataset_dir: Path) -> Iterator[Document]:
    for row in _read_jsonl(dataset_dir / "corpus.jsonl"):
        yield Document(str(row["_id"]), str(row.get("title") or ""), str(row.get("text") or ""))


def load_queries(dataset_dir: Path) -> dict[str, str]:
    return {
        str(row["_id"]): str(row.get("text") or "")
        for row in _read_jsonl(dataset_dir / "queries.jsonl")
    }


def resolve_qrels(dataset_dir: Path, qrels: str | None) -> Path:
    """The qrels file: a path, a path inside the dataset, or a split name (``train``).

    Without one, the dataset's only ``qrels/*.tsv``.
    """
    if qrels is None:
        found = sorted((dataset_dir / "qrels").glob("*.tsv"))
        if len(found) == 1:
            return found[0]
        names = ", ".join(p.stem for p in found) or "none"
        raise RiffluxError(f"pass --qrels FILE (qrels files in {dataset_dir / 'qrels'}: {names})")
    for candidate in (Path(qrels), dataset_dir / qrels, dataset_dir / "qrels" / f"{qrels}.tsv"):
        if candidate.is_file():
            return candidate
    raise RiffluxError(f"qrels file {qrels!r} not found (also looked in {dataset_dir / 'qrels'})")


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query id → {document id → grade}, from ``query-id corpus-id score`` TSV lines.

    A header line is skipped; TREC's four-column ``qid 0 docid grade`` is also read.
    Lines with a tab are split on tabs only, so ids may contain spaces.
    """
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            # BEIR qrels are tab-separated (ids may hold spaces); TREC's are space-separated.
            fields = line.rstrip("\r\n").split("\t") if "\t" in line else line.split()
            if not any(fields):
                continue
            if len(fields) == 4:
                fields = [fields[0], fields[2], fields[3]]
            if len(fields) != 3:
                raise RiffluxError(f"{path}:{number}: expected query-id, corpus-id, score")
            try:
                grade = int(float(fields[2]))
            except ValueError:
                if number == 1:
                    continue  # the header
                raise RiffluxError(
                    f"{path}:{number}: score {fields[2]!r} is not a number"
                ) from None
            qrels.setdefault(fields[0], {})[fields[1]] = grade
    return qrels


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def index_fingerprint(settings: Settings) -> dict[str, object]:
    """What, besides the corpus, decides the index's chunks and vectors."""
    return {
        "layout": LAYOUT_VERSION,
        "max_chunk_chars": settings.max_chunk_chars,
        "min_chunk_chars": settings.min_chunk_chars,
        "embedder": embedder_label_for(settings),
        # A probe of the embedding input: changing what is embedded changes the key.
        "embedding_input": prepare.embedding_input("Heading > Sub", "Content."),
    }


def cache_key(dataset_dir: Path, settings: Settings) -> str:
    digest = hashlib.sha256(_file_sha256(dataset_dir / "corpus.jsonl").encode())
    digest.update(json.dumps(index_fingerprint(settings), sort_keys=True).encode())
    return digest.hexdigest()[:16]


def default_cache_root(settings: Settings) -> Path:
    """``RIFFLUX_EVAL_CACHE_DIR``, else :data:`DEFAULT_CACHE_ROOT`."""
    return settings.eval_cache_dir or DEFAULT_CACHE_ROOT.expanduser()


def cache_dir_for(dataset_dir: Path, settings: Settings, cache_root: Path | None = None) -> Path:
    root = cache_root if cache_root is not None else default_cache_root(settings)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", dataset_dir.resolve().name) or "dataset"
    return root / f"{name}-{cache_key(dataset_dir, settings)}"


def materialise(dataset_dir: Path, cache_dir: Path) -> dict[str, str]:
    """Write every document once as markdown under ``cache_dir/docs``.

    Returns stored path → document id. Files already written are left untouched (same
    mtime), so the indexer sees them as unchanged.
    """
    docs_dir = cache_dir / DOCS_DIR
    marker = cache_dir / READY_MARKER
    ready = marker.is_file()
    docs_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, str] = {}
    for doc in iter_corpus(dataset_dir):
        rel = doc_rel_path(doc.doc_id)
        if rel in paths:
            raise RiffluxError(f"document id {doc.doc_id!r} appears twice in the corpus")
        paths[rel] = doc.doc_id
        if not ready:
            _write_if_changed(cache_dir / rel, doc_markdown(doc))
    marker.write_text(f"{len(paths)}\n", encoding="utf-8")
    return paths


def _write_if_changed(path: Path, text: str) -> None:
    data = text.encode("utf-8")
    try:
        if path.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
