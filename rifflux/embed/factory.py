"""Choose the embedder from settings: ``onnx``, ``hash``, ``torch``, or ``auto`` (onnx if it
can run).

The backend names the model, and so the label of the vectors; the device says where it
runs. ``RIFFLUX_EMBEDDING_DEVICE=cuda[:N]`` runs the ``torch`` embedder on that GPU (with
``auto`` or ``torch``; any other backend is an error, never another model); ``cpu`` runs
the configured backend, ``torch`` included, on the CPU (a search of an index that GPU
workers embedded embeds its queries so).
"""

from __future__ import annotations

import threading

import structlog

from rifflux.config import Settings
from rifflux.embed.base import Embedder
from rifflux.embed.hashing import HashEmbedder
from rifflux.embed.onnx import ONNX_LABEL, OnnxEmbedder, onnx_unavailable_reason
from rifflux.embed.torch_minilm import TORCH_LABEL, TorchEmbedder, torch_unavailable_reason
from rifflux.errors import RiffluxError

_fallback_warned = False
_fallback_lock = threading.Lock()


def _resolve_backend(settings: Settings) -> tuple[str, str | None]:
    """The backend to use, and why ONNX cannot run (None if it can or was not asked)."""
    if settings.embedding_device != "cpu":
        if settings.embedding_backend not in ("auto", "torch"):
            raise RiffluxError(
                f"RIFFLUX_EMBEDDING_DEVICE={settings.embedding_device} embeds with the torch "
                f"backend, but RIFFLUX_EMBEDDING_BACKEND={settings.embedding_backend}: set it "
                "to torch (or auto)"
            )
        return "torch", None
    if settings.embedding_backend == "torch":
        return "torch", None
    if settings.embedding_backend == "hash":
        return "hash", None
    reason = onnx_unavailable_reason()
    if settings.embedding_backend == "onnx":
        if reason is not None:
            raise RiffluxError(f"RIFFLUX_EMBEDDING_BACKEND=onnx but {reason}")
        return "onnx", None
    if settings.embedding_backend == "auto":
        return ("hash", reason) if reason is not None else ("onnx", None)
    raise RiffluxError(
        f"embedding backend {settings.embedding_backend!r} is unknown: use auto, onnx, hash "
        "or torch"
    )


def embedder_label_for(settings: Settings) -> str:
    """The label :func:`make_embedder` would give, without loading any model."""
    backend, _ = _resolve_backend(settings)
    if backend == "torch":
        return TORCH_LABEL
    return ONNX_LABEL if backend == "onnx" else f"hash:{settings.hash_embedding_dim}"


# A process that embeds queries (``make_embedder(..., queries=True)``: a search) runs
# onnxruntime differently from one that embeds batches:
# - QUERY_ONNX_THREADS intra-op threads when RIFFLUX_ONNX_THREADS is 0: a query is one
#   short text, whose work is too small to split; with a thread per core, agent-style
#   hybrid p50 was 25.9-28.6 ms against 17.8-17.9 ms with one (under load);
# - constant folding on: without it every run dequantises the int8 weights again, which
#   is most of a short query's cost (8.8-9.2 -> 5.6 ms of CPU for a question). Workers
#   keep it off: folded weights cost ~45 MB a process. The vectors differ by at most
#   1.6e-7 (cosine 0.9999999 to the unfolded one's).
QUERY_ONNX_THREADS = 1


def make_embedder(settings: Settings, *, queries: bool = False) -> Embedder:
    """The configured embedder. ``auto`` falls back to hashing, with one warning per process.

    ``queries``: for a process that embeds one query at a time (a search), not batches.
    """
    backend, reason = _resolve_backend(settings)
    if backend == "torch":
        return _torch_embedder(settings, queries=queries)
    if backend == "onnx":
        threads = settings.onnx_threads
        if queries and not threads:
            threads = QUERY_ONNX_THREADS
        return OnnxEmbedder(
            threads=threads,
            fold_constants=queries,
            batch_size=settings.embed_batch_size,
            token_budget=settings.embed_token_budget,
        )
    if reason is not None:
        _warn_fallback_once(reason)
    return HashEmbedder(settings.hash_embedding_dim)


def _torch_embedder(settings: Settings, *, queries: bool) -> TorchEmbedder:
    """The torch embedder on the configured device; one line naming what is missing
    (torch, a CUDA runtime, a CUDA device) if it cannot run there."""
    device = settings.embedding_device
    reason = torch_unavailable_reason(device)
    if reason is not None:
        raise RiffluxError(f"cannot embed with torch on {device}: {reason}")
    if device != "cpu":
        return TorchEmbedder(device)
    threads = settings.onnx_threads
    if queries and not threads:
        threads = QUERY_ONNX_THREADS
    return TorchEmbedder(
        device,
        batch_size=settings.embed_batch_size,
        token_budget=settings.embed_token_budget,
        threads=threads,
    )


def _warn_fallback_once(reason: str) -> None:
    global _fallback_warned
    with _fallback_lock:
        if _fallback_warned:
            return
        _fallback_warned = True
    structlog.get_logger(__name__).warning(
        "embedding_backend_fallback",
        backend="hash",
        reason=reason,
        hint="semantic search quality is much lower with hashed embeddings",
    )
