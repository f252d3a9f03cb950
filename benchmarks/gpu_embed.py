"""Raw embedding throughput of the torch embedder (the GPU worker's) at several batch
sizes, in fp32 and fp16, on awesome-copilot chunks; and how close its vectors are to the
ONNX int8 model's on the same chunks.

    python -m benchmarks.gpu_embed --device cuda                       # the GPU table
    python -m benchmarks.gpu_embed --device cpu --batch-sizes 16,32 --limit 200

The chunks are those an index job embeds (the indexer's chunker and embedding input,
files in sorted path order, the first ``--limit``). Each configuration embeds all of
them in one ``embed_batch`` call (tokenising included: what a worker's embed step
does) after a warm-up call at the same batch size; a batch holds ``batch size`` texts
(its token budget is batch size × 256, so the count cuts it). On CUDA, the run is
timed to the vectors being back in host memory; ``nvidia-smi`` utilisation is sampled
during it where the tool exists. ``--parity N`` compares the first N chunks' vectors
with the ONNX embedder's: least and mean cosine, largest element difference.

Prints JSON lines: the machine (with torch's version and the device), then one
``gpu_embed`` line per configuration and one ``gpu_embed_parity`` line per dtype.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import DEFAULT_CORPUS, emit, emit_machine
from rifflux.config import Settings
from rifflux.embed.onnx import DEFAULT_MAX_TOKENS, OnnxEmbedder
from rifflux.embed.torch_minilm import TorchEmbedder, torch_unavailable_reason
from rifflux.index.chunker import chunk_markdown
from rifflux.index.prepare import embedding_input

DEFAULT_BATCH_SIZES = "64,128,256,512,1024"


def load_chunks(corpus: Path, limit: int) -> tuple[list[str], int]:
    """The embedding inputs of the first ``limit`` chunks, and the files they came from."""
    settings = Settings()
    texts: list[str] = []
    files = 0
    for path in sorted(corpus.rglob("*.md")):
        if len(texts) >= limit:
            break
        chunks = chunk_markdown(
            path.read_text(encoding="utf-8", errors="replace"),
            max_chars=settings.max_chunk_chars,
            min_chars=settings.min_chunk_chars,
        )
        texts.extend(embedding_input(c.heading_path, c.content) for c in chunks)
        files += 1
    return texts[:limit], files


class GpuUtilisation(threading.Thread):
    """Samples ``nvidia-smi``'s GPU utilisation (%) every ``interval`` seconds."""

    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.samples: list[int] = []
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            done = subprocess.run(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode == 0 and done.stdout.strip():
                self.samples.append(int(done.stdout.split()[0]))

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self.join()
        if not self.samples:
            return {}
        return {"gpu_util_mean": round(sum(self.samples) / len(self.samples), 1)}


def device_facts(device: str) -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    if device != "cpu":
        facts["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return facts


def run_config(
    texts: list[str], device: str, dtype: str, batch_size: int, threads: int
) -> tuple[dict[str, Any], np.ndarray]:
    import torch

    embedder = TorchEmbedder(
        device,
        dtype=dtype,
        batch_size=batch_size,
        token_budget=batch_size * DEFAULT_MAX_TOKENS,
        threads=threads,
    )
    lengths = [n for batch in embedder.batch_lengths(texts) for n in batch]
    padded = sum(len(b) * max(b) for b in embedder.batch_lengths(texts))
    embedder.embed_batch(texts[:batch_size])  # warm-up: load, kernels, allocator
    if device != "cpu":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    sampler = GpuUtilisation() if device != "cpu" and shutil.which("nvidia-smi") else None
    if sampler is not None:
        sampler.start()
    start = time.perf_counter()
    vectors = embedder.embed_batch(texts)
    seconds = time.perf_counter() - start
    line: dict[str, Any] = {
        "device": device,
        "dtype": dtype,
        "batch_size": batch_size,
        "chunks": len(texts),
        "tokens": sum(lengths),
        "padding": round(padded / sum(lengths) - 1, 4),
        "seconds": round(seconds, 3),
        "chunks_per_s": round(len(texts) / seconds, 1),
        "tokens_per_s": round(sum(lengths) / seconds),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    if device != "cpu":
        line["gpu_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    if sampler is not None:
        line.update(sampler.stop())
    return line, vectors


def parity(got: np.ndarray, want: np.ndarray) -> dict[str, Any]:
    cosines = (got * want).sum(axis=1)
    return {
        "min_cosine": float(np.round(cosines.min(), 7)),
        "mean_cosine": float(np.round(cosines.mean(), 7)),
        "max_abs_diff": float(np.abs(got - want).max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--device", default="cuda", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtypes", default="fp32,fp16", help="fp16 is skipped on cpu")
    parser.add_argument("--batch-sizes", default=DEFAULT_BATCH_SIZES)
    parser.add_argument("--limit", type=int, default=20_000, help="chunks (all: ~15k)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: its own)")
    parser.add_argument(
        "--parity", type=int, default=1000, help="chunks compared with ONNX (0: none)"
    )
    args = parser.parse_args()
    reason = torch_unavailable_reason(args.device)
    if reason is not None:
        parser.error(f"cannot embed on {args.device}: {reason}")
    corpus = args.corpus.expanduser().resolve()
    texts, files = load_chunks(corpus, args.limit)
    dtypes = [d for d in args.dtypes.split(",") if d and not (d == "fp16" and args.device == "cpu")]
    sizes = [int(n) for n in args.batch_sizes.split(",") if n]
    emit_machine(corpus=str(corpus), files=files, chunks=len(texts), **device_facts(args.device))
    reference = None
    if args.parity:
        reference = OnnxEmbedder(threads=args.threads).embed_batch(texts[: args.parity])
    for dtype in dtypes:
        vectors = None
        for size in sizes:
            line, vectors = run_config(texts, args.device, dtype, size, args.threads)
            emit("gpu_embed", **line)
        if reference is not None and vectors is not None:
            got = vectors[: len(reference)]
            emit("gpu_embed_parity", device=args.device, dtype=dtype, chunks=len(reference),
                 **parity(got, reference))  # fmt: skip


if __name__ == "__main__":
    main()
