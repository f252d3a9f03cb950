"""Vectors stored as their int8 rows (issue 22): the cache and every search result are
those of an index that stored float32 rows, and such an older index keeps working."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from rifflux_testing import copy_corpus, make_settings

from rifflux.config import Settings
from rifflux.index.indexer import Indexer
from rifflux.search.service import SearchService
from rifflux.store.connection import open_index
from rifflux.store.vector_blobs import encode_rows, int8_rows, quantize_rows
from rifflux.vectors.segments import read_manifest, segment_files, vectors_dir

QUERIES = ("code review agent", "azure deployment", "write unit tests", "terraform")
MODES = ("lexical", "semantic", "hybrid")


def float32_blobs(vectors: Sequence[np.ndarray]) -> list[bytes]:
    """What the writer stored before issue 22: raw little-endian float32."""
    return [np.ascontiguousarray(v, dtype="<f4").tobytes() for v in vectors]


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        st.tuples(st.integers(1, 6), st.integers(1, 48)),
        elements=st.floats(-4, 4, width=32),
    )
)
def test_requantizing_an_int8_row_is_the_identity(rows: np.ndarray) -> None:
    rows[0] = 0.0  # a zero row stays zero
    once = quantize_rows(rows)
    assert np.array_equal(quantize_rows(once.astype(np.float32)), once)
    dim = rows.shape[1]
    from_floats = int8_rows(enumerate(float32_blobs(list(rows))), len(rows), dim)
    from_int8 = int8_rows(enumerate(encode_rows(list(rows))), len(rows), dim)
    assert np.array_equal(from_floats, once)
    assert np.array_equal(from_int8, once)
    # A matrix is encoded as the list of its rows is.
    assert encode_rows(rows) == encode_rows(list(rows))
    assert encode_rows(rows.astype(np.float64)) == encode_rows(list(rows))


def test_int8_rows_puts_each_blob_at_its_row_whatever_its_form() -> None:
    rng = np.random.default_rng(7)
    vectors = list(rng.normal(size=(40, 12)).astype(np.float32))
    mixed = [
        (row, float32_blobs([vectors[row]])[0] if row % 3 else encode_rows([vectors[row]])[0])
        for row in rng.permutation(len(vectors)).tolist()
    ]
    one_by_one = np.stack([int8_rows([(0, blob)], 1, 12)[0] for _, blob in sorted(mixed)])
    assert np.array_equal(int8_rows(mixed, len(vectors), 12), one_by_one)
    assert np.array_equal(one_by_one, quantize_rows(np.stack(vectors)))


def test_a_blob_of_neither_length_is_refused_with_a_fix() -> None:
    with pytest.raises(ValueError, match="index --force"):
        int8_rows([(0, b"\x00" * 10)], 1, 4)


def build(tmp_path: Path, docs: Path, name: str) -> Settings:
    cfg = make_settings(tmp_path, db_path=tmp_path / name / "index.db", base_dir=docs)
    Indexer(cfg).run([docs])
    return cfg


def blob_lengths(cfg: Settings) -> set[int]:
    conn = open_index(cfg.db_path)
    try:
        return {row[0] for row in conn.execute("SELECT DISTINCT length(vec) FROM embeddings")}
    finally:
        conn.close()


def cache_rows(cfg: Settings) -> tuple[np.ndarray, np.ndarray]:
    """The cache's int8 rows and their meta rows, over every segment in order."""
    directory = vectors_dir(cfg.db_path)
    found = read_manifest(directory)
    assert found is not None
    vecs, metas = [], []
    for segment in found[0].segments:
        vec_name, meta_name, _ = segment_files(segment.id)
        vecs.append(np.load(directory / vec_name))
        metas.append(np.load(directory / meta_name))
    return np.concatenate(vecs), np.concatenate(metas)


def results(cfg: Settings) -> list[list[dict[str, Any]]]:
    service = SearchService(cfg)
    try:
        return [service.search(q, top_k=10, mode=m) for q in QUERIES for m in MODES]
    finally:
        service.close()


def test_int8_and_float32_indexes_give_identical_caches_and_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = copy_corpus(tmp_path / "docs", limit=12)
    new = build(tmp_path, docs, "int8")
    with monkeypatch.context() as patch:
        # The one encoder every vector write goes through (encode_vectors and
        # encode_matrix call it).
        patch.setattr("rifflux.store.vector_blobs.encode_rows", float32_blobs)
        old = build(tmp_path, docs, "float32")
    assert blob_lengths(new) == {384}
    assert blob_lengths(old) == {4 * 384}
    for a, b in zip(cache_rows(new), cache_rows(old), strict=True):
        assert a.dtype == b.dtype
        assert np.array_equal(a, b)
    assert results(new) == results(old)
    assert results(new)[1], "the semantic search found nothing: the check proves nothing"

    # An older index rewritten in part holds both forms; its reused rows become int8.
    edited = sorted(docs.rglob("*.md"))[0]
    edited.write_text(edited.read_text() + "\n\n## Appendix\n\nA new closing paragraph.\n")
    Indexer(new).run([docs])
    Indexer(old).run([docs])
    assert blob_lengths(old) == {384, 4 * 384}
    for a, b in zip(cache_rows(new), cache_rows(old), strict=True):
        assert np.array_equal(a, b)
    assert results(new) == results(old)
