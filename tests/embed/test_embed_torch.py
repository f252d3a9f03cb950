"""The torch embedder (the GPU worker's) on the CPU device: its vectors against the ONNX
int8 model's, its own label and the guard that keeps the two apart, batching by length,
and the one-line refusal where no CUDA is present.

Skipped where torch is not installed (``pip install 'rifflux[gpu]'``; ``.ci/run``
installs it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rifflux_testing import AWESOME_COPILOT, make_settings

from rifflux.config import Settings
from rifflux.embed import Embedder, OnnxEmbedder, make_embedder, torch_minilm
from rifflux.embed.factory import embedder_label_for
from rifflux.embed.onnx import ONNX_LABEL
from rifflux.embed.torch_minilm import TORCH_LABEL, TorchEmbedder, torch_unavailable_reason
from rifflux.errors import EmbeddingModelMismatch, RiffluxError
from rifflux.index import pipeline
from rifflux.index.chunker import chunk_markdown
from rifflux.index.jobspec import JobSpec
from rifflux.index.messages import EmbedRequest
from rifflux.index.prepare import embedding_input

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(
    not HAS_TORCH, reason="torch is not installed (pip install 'rifflux[gpu]')"
)
# The least cosine between a torch (CPU, fp32) vector and the ONNX int8 model's over the
# golden texts below (34 texts); measured 0.9999999 (largest element difference 2.5e-7).
MIN_COSINE = 0.99999

GOLDEN = [
    "",
    "Install on Linux.",
    "how do I review a pull request for security issues",
    "Rifflux indexes markdown files and serves hybrid search over MCP. " * 40,
    "Ünïcödé façade, naïve café — 日本語のテキストと中文文本。",
    "```python\ndef embed(texts: list[str]) -> np.ndarray:\n    return model(texts)\n```",
]


def golden_chunks(files: int = 2) -> list[str]:
    """Real chunk texts, as a job embeds them: the first ``files`` vendored agent files."""
    paths = sorted((AWESOME_COPILOT / "agents").glob("*.md"))[:files]
    return [
        embedding_input(chunk.heading_path, chunk.content)
        for path in paths
        for chunk in chunk_markdown(path.read_text(encoding="utf-8"), max_chars=1200, min_chars=600)
    ]


@pytest.fixture(scope="module")
def torch_cpu() -> TorchEmbedder:
    return TorchEmbedder("cpu", batch_size=16, token_budget=4096, threads=1)


def test_the_torch_label_is_its_own_and_known_without_torch() -> None:
    embedder = TorchEmbedder("cuda:0")  # nothing is loaded before the first batch
    assert isinstance(embedder, Embedder)
    assert (embedder.label, embedder.dim) == ("torch:all-MiniLM-L6-v2-int8", 384)
    assert TorchEmbedder("cuda", dtype="fp16").label == "torch:all-MiniLM-L6-v2-int8-fp16"
    assert TORCH_LABEL != ONNX_LABEL
    assert embedder_label_for(Settings(embedding_backend="torch")) == TORCH_LABEL
    # A GPU device embeds with torch: `auto` resolves to it, any other backend is refused.
    assert embedder_label_for(Settings(embedding_device="cuda")) == TORCH_LABEL
    with pytest.raises(RiffluxError, match="RIFFLUX_EMBEDDING_BACKEND=onnx"):
        embedder_label_for(Settings(embedding_device="cuda:1", embedding_backend="onnx"))


def test_a_job_submitted_from_a_gpu_process_records_the_torch_backend() -> None:
    spec = JobSpec.from_settings(Settings(embedding_device="cuda"))
    assert spec.embedding_backend == "torch"
    # A worker's own device never changes the job's label.
    worker = Settings(embedding_backend="onnx", embedding_device="cuda")
    job = JobSpec(embedding_backend="onnx").settings_for(worker, "/tmp/index.db")
    assert job.embedding_device == "cpu"
    assert embedder_label_for(job) == ONNX_LABEL


def test_without_torch_the_reason_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    reason = torch_unavailable_reason("cuda")
    assert reason == "torch is not installed: pip install 'rifflux[gpu]'"
    with pytest.raises(RiffluxError, match="torch is not installed"):
        make_embedder(Settings(embedding_backend="torch"))


@needs_torch
@pytest.mark.slow
def test_torch_on_cpu_gives_the_onnx_models_vectors_within_the_measured_cosine(
    torch_cpu: TorchEmbedder,
) -> None:
    texts = GOLDEN + golden_chunks()
    got = torch_cpu.embed_batch(texts)
    want = OnnxEmbedder(threads=1).embed_batch(texts)
    assert got.shape == want.shape == (len(texts), 384)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cosines = (got * want).sum(axis=1)
    assert cosines.min() >= MIN_COSINE, (cosines.min(), texts[int(cosines.argmin())][:80])


@needs_torch
@pytest.mark.slow
def test_batches_hold_texts_of_similar_length_within_count_and_budget(
    torch_cpu: TorchEmbedder,
) -> None:
    texts = golden_chunks(files=40) + GOLDEN  # tokenised only: cheap
    batches = torch_cpu.batch_lengths(texts)
    assert sum(len(b) for b in batches) == len(texts)
    flat = [n for batch in batches for n in batch]
    assert flat == sorted(flat)  # sorted by length across and within batches
    for batch in batches:
        assert len(batch) <= torch_cpu.batch_size
        assert len(batch) == 1 or len(batch) * max(batch) <= torch_cpu.token_budget
    # Padding: sorted batches pad far less than the same batch sizes in input order.
    padded = sum(len(b) * max(b) for b in batches)
    counts = [len(ids) for ids in torch_cpu._load()[1].encode_batch(texts)]
    size = torch_cpu.batch_size
    unsorted = sum(
        len(counts[i : i + size]) * max(counts[i : i + size]) for i in range(0, len(counts), size)
    )
    # Measured on these 377 texts: 2 % padding sorted, 23 % in input order.
    assert padded <= 1.05 * sum(flat) and unsorted > 1.15 * sum(flat), (padded, unsorted)
    # Batching changes the arithmetic's order only: each text alone gives its vector.
    together = torch_cpu.embed_batch(GOLDEN)
    alone = np.vstack([torch_cpu.embed_batch([text]) for text in GOLDEN])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert torch_cpu.embed_batch([]).shape == (0, 384)


@needs_torch
@pytest.mark.slow
def test_the_label_guard_refuses_a_batch_of_the_other_embedder(torch_cpu: TorchEmbedder) -> None:
    def request(model: str) -> EmbedRequest:
        return EmbedRequest("/tmp/index.db", "job-1", 0, model, ("a.md",), (("h", "text"),))

    with pytest.raises(EmbeddingModelMismatch, match="torch:all-MiniLM-L6-v2-int8"):
        pipeline.embed(request(ONNX_LABEL), torch_cpu)
    with pytest.raises(EmbeddingModelMismatch, match="onnx:all-MiniLM-L6-v2-int8"):
        pipeline.embed(request(TORCH_LABEL), OnnxEmbedder(threads=1))
    vectors = pipeline.embed(request(TORCH_LABEL), torch_cpu)
    assert vectors.model == TORCH_LABEL


@pytest.mark.skipif(
    HAS_TORCH and torch_unavailable_reason("cuda") is None, reason="a CUDA device is present"
)
def test_worker_device_cuda_without_cuda_is_one_line_naming_what_is_missing(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIFFLUX_")}
    env["RIFFLUX_DB_PATH"] = str(settings.db_path)
    done = subprocess.run(
        [sys.executable, "-m", "rifflux.cli", "worker", "--device", "cuda"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    missing = "torch is not installed" if not HAS_TORCH else "no CUDA"
    assert line.startswith("rifflux: error: cannot embed on cuda: ") and missing in line, line
    assert not settings.db_path.exists()  # no pool, no index, no fallback


def test_a_gpu_pool_is_one_embed_only_process_with_two_batches_in_flight() -> None:
    from workers.pool import GPU_WORKER_THREADS, PoolSpec

    gpu = replace(Settings(), embedding_device="cuda:0", worker_max_rss_mb=1024)
    spec = PoolSpec.for_device(gpu)
    assert (spec.processes, spec.threads, spec.queues) == (1, 2, ("rifflux_embed",))
    assert GPU_WORKER_THREADS >= 2 and spec.lexical_threads == 0
    assert spec.max_rss_mb >= 8192
    with pytest.raises(RiffluxError, match="only embeds"):
        PoolSpec.for_device(gpu, queues=("rifflux_plan",))
    cpu = PoolSpec.for_device(Settings(workers=3))
    assert (cpu.processes, cpu.threads, cpu.queues) == (3, 1, ())


def test_fp16_is_for_cuda_only_and_devices_are_checked() -> None:
    with pytest.raises(ValueError, match="fp16"):
        TorchEmbedder("cpu", dtype="fp16")
    with pytest.raises(ValueError, match="cpu, cuda or cuda:N"):
        TorchEmbedder("gpu")
    assert torch_minilm.valid_device("cuda:3") and not torch_minilm.valid_device("cuda:x")
