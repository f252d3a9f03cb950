"""Embedders: text in, L2-normalised float32 vectors out, behind one small protocol.

- :class:`Embedder` (``base.py``): ``label``, ``dim`` and ``embed_batch(texts)``.
- :class:`OnnxEmbedder` (``onnx.py``): all-MiniLM-L6-v2 int8 via onnxruntime, label
  ``onnx:all-MiniLM-L6-v2-int8``.
- :class:`TorchEmbedder` (``torch_minilm.py``): the same MiniLM through PyTorch on a CUDA
  GPU or the CPU, label ``torch:all-MiniLM-L6-v2-int8``.
- :class:`HashEmbedder` (``hashing.py``): feature hashing of words and bigrams, label
  ``hash:<dim>``; no dependencies, lexical only.
- :func:`make_embedder` / :func:`embedder_label_for` (``factory.py``): pick one from
  :class:`~rifflux.config.Settings`; the label function loads nothing, so comparing it
  with the label stored in an index is cheap.

Importing this package does not import onnxruntime, tokenizers or torch.
"""

from rifflux.embed.base import Embedder, l2_normalise
from rifflux.embed.factory import embedder_label_for, make_embedder
from rifflux.embed.hashing import HashEmbedder
from rifflux.embed.onnx import OnnxEmbedder, onnx_unavailable_reason
from rifflux.embed.torch_minilm import TorchEmbedder, torch_unavailable_reason

__all__ = [
    "Embedder",
    "HashEmbedder",
    "OnnxEmbedder",
    "TorchEmbedder",
    "embedder_label_for",
    "l2_normalise",
    "make_embedder",
    "onnx_unavailable_reason",
    "torch_unavailable_reason",
]
