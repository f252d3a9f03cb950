import pytest
import structlog

from rifflux.config import Settings
from rifflux.embed import HashEmbedder, OnnxEmbedder, embedder_label_for, factory, make_embedder
from rifflux.errors import RiffluxError
from rifflux.search.snapshot import QueryEmbedder

MISSING = "the ONNX embedder needs onnxruntime: pip install onnxruntime"


@pytest.fixture
def onnx_missing(monkeypatch):
    monkeypatch.setattr(factory, "onnx_unavailable_reason", lambda: MISSING)
    monkeypatch.setattr(factory, "_fallback_warned", False)


def test_hash_backend_uses_the_configured_dim():
    settings = Settings(embedding_backend="hash", hash_embedding_dim=128)
    embedder = make_embedder(settings)
    assert isinstance(embedder, HashEmbedder)
    assert embedder.label == embedder_label_for(settings) == "hash:128"


def test_onnx_backend_passes_threads_batch_size_and_token_budget_without_loading_the_model():
    settings = Settings(
        embedding_backend="onnx", onnx_threads=1, embed_batch_size=8, embed_token_budget=300
    )
    embedder = make_embedder(settings)
    assert isinstance(embedder, OnnxEmbedder)
    assert (embedder.threads, embedder.batch_size, embedder.token_budget) == (1, 8, 300)
    assert embedder._session is None
    assert embedder.label == embedder_label_for(settings) == "onnx:all-MiniLM-L6-v2-int8"


def test_a_query_embedder_uses_one_onnx_thread_unless_told_otherwise():
    default = Settings(embedding_backend="onnx")
    query = make_embedder(default, queries=True)
    assert isinstance(query, OnnxEmbedder) and query.fold_constants
    assert query.threads == factory.QUERY_ONNX_THREADS == 1
    batches = make_embedder(default)  # one thread per core, weights left int8
    assert isinstance(batches, OnnxEmbedder) and not batches.fold_constants
    assert batches.threads == 0
    chosen = Settings(embedding_backend="onnx", onnx_threads=3)
    assert make_embedder(chosen, queries=True).threads == 3


def test_searches_embed_their_queries_with_the_query_embedder():
    embedder = QueryEmbedder(Settings(embedding_backend="onnx")).embedder
    assert isinstance(embedder, OnnxEmbedder) and embedder.threads == 1


def test_auto_picks_onnx_when_it_can_run():
    settings = Settings(embedding_backend="auto")
    assert isinstance(make_embedder(settings), OnnxEmbedder)
    assert embedder_label_for(settings) == "onnx:all-MiniLM-L6-v2-int8"


def test_onnx_backend_without_its_packages_says_what_to_install(onnx_missing):
    settings = Settings(embedding_backend="onnx")
    with pytest.raises(RiffluxError, match="pip install onnxruntime"):
        make_embedder(settings)
    with pytest.raises(RiffluxError, match="pip install onnxruntime"):
        embedder_label_for(settings)


def test_auto_falls_back_to_hash_with_one_warning_per_process(onnx_missing):
    settings = Settings(embedding_backend="auto", hash_embedding_dim=256)
    with structlog.testing.capture_logs() as logs:
        first = make_embedder(settings)
        second = make_embedder(settings)
    assert isinstance(first, HashEmbedder) and isinstance(second, HashEmbedder)
    assert first.label == embedder_label_for(settings) == "hash:256"
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 1
    assert warnings[0]["reason"] == MISSING


def test_label_check_does_not_warn(onnx_missing):
    with structlog.testing.capture_logs() as logs:
        embedder_label_for(Settings(embedding_backend="auto"))
    assert logs == []


def test_unknown_backend_names_the_valid_ones():
    with pytest.raises(RiffluxError, match="auto, onnx, hash or torch"):
        make_embedder(Settings(embedding_backend="bert"))
