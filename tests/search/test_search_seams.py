"""The seams of the split search service (issue 21): ranking is a function of one read-only
snapshot, and a CJK query is split by the very tokenizer the writer indexes with."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
from cjk_docs import CJK_DOCS
from rifflux_testing import copy_corpus, make_settings

from rifflux.config import Settings
from rifflux.embed.hashing import HashEmbedder
from rifflux.index.indexer import Indexer
from rifflux.search import ranking
from rifflux.search.query import build_cjk_match_query
from rifflux.search.request import SearchRequest
from rifflux.search.service import SearchService
from rifflux.store.cjk import side_row


def test_ranking_over_a_snapshot_is_the_services_search(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    Indexer(settings).run([copy_corpus(tmp_path / "docs", limit=20)])
    service = SearchService(settings)
    for mode, options in [("lexical", {}), ("hybrid", {"fusion": "minmax"}), ("hybrid", {})]:
        request = SearchRequest.from_arguments(
            {"query": 'review "pull request" code', "mode": mode, "top_k": 5, **options}
        )
        snapshot = service.snapshot()
        with (deadline := service.deadline()).guarding(snapshot.conn):
            ranked, warning = ranking.rank(snapshot, request, 5, deadline)
        assert warning is None and ranked
        assert ranked == service.search(request.query, top_k=5, mode=mode, **options)
        assert ranked == service.search_response(request)["results"]
    service.close()


def test_a_cjk_querys_bigrams_are_tokens_the_writer_indexed() -> None:
    for name, text in CJK_DOCS.items():
        if name.startswith("en/"):
            continue  # No CJK text: no side row.
        heading, _, body = text.partition("\n")
        row = side_row(1, heading, body)
        indexed = set(re.findall(r"\w+", f"{row[1]} {row[2]}")) if row else set()
        runs = re.findall(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]{2,6}", body)[:5]
        assert runs and indexed
        for run in runs:
            match = build_cjk_match_query(run)
            assert match is not None
            clauses = [c.strip('"*') for c in match.split(" OR ") if " " not in c]
            assert clauses and set(clauses) <= indexed, (run, clauses)


class RecordingEmbedder(HashEmbedder):
    """The hash embedder, recording the thread of every query it embeds; ``pause``
    seconds per call make it as costly as ONNX (a sleep lasts at least that long, so the
    measured cost is at least ``pause`` however loaded the machine)."""

    def __init__(self, settings: Settings, pause: float = 0.0) -> None:
        super().__init__(settings.hash_embedding_dim)
        self.pause = pause
        self.threads: list[str] = []

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        time.sleep(self.pause)
        return super().embed_batch(texts)


# Three files, group_by="file" and top_k 5: a hybrid search searches deeper twice (depth
# 5, 20, 80), and the query is still embedded once.
DEEPER_HYBRID = {"mode": "hybrid", "group_by": "file", "top_k": 5}


def test_a_hybrid_query_is_embedded_once_beside_its_lexical_half_when_costly(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    Indexer(settings).run([copy_corpus(tmp_path / "docs", limit=3)])
    plain = SearchService(settings)
    costly = RecordingEmbedder(settings, pause=2 * ranking.BESIDE_MIN_SECONDS)
    service = SearchService(settings, embedder=costly)
    here = threading.current_thread().name
    try:
        service.search("pull request", mode="semantic", top_k=5)  # Learns the cost.
        assert costly.threads == [here]
        expected = plain.search("review pull request code", **DEEPER_HYBRID)
        assert service.search("review pull request code", **DEEPER_HYBRID) == expected
        assert len(costly.threads) == 2 and costly.threads[1].startswith("rifflux-query")
    finally:
        for each in (service, plain):
            each.close()


def test_a_cheap_query_embedding_is_not_handed_to_a_thread(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    Indexer(settings).run([copy_corpus(tmp_path / "docs", limit=3)])
    plain = SearchService(settings)
    cheap = RecordingEmbedder(settings)
    service = SearchService(settings, embedder=cheap)
    here = threading.current_thread().name
    try:
        service.search("pull request", mode="semantic", top_k=5)
        # The cost the service learned, stated rather than measured: a measured one
        # depends on how loaded the machine is.
        service._embedder.last_seconds = ranking.BESIDE_MIN_SECONDS / 2
        expected = plain.search("review pull request code", **DEEPER_HYBRID)
        assert service.search("review pull request code", **DEEPER_HYBRID) == expected
        assert cheap.threads == [here, here]
    finally:
        for each in (service, plain):
            each.close()
