"""A dependency-free embedder: signed feature hashing of words and word bigrams.

It captures lexical overlap only, not meaning; it is the fallback when the ONNX model
cannot be loaded, and a fast stand-in for tests. Vectors depend on nothing but the text
and ``dim``: tokens are hashed with BLAKE2b (Python's ``hash()`` is salted per process),
so vectors stored by one process can be compared with vectors made by another.

A feature (a word, or a pair of adjacent words) occurring ``tf`` times in a text adds
``±(1 + ln tf)`` to one of ``dim`` buckets; the bucket and the sign come from different
bits of the feature's 64-bit hash. The row is then L2-normalised.
"""

from __future__ import annotations

import hashlib
import re
import threading

import numpy as np

from rifflux.embed.base import l2_normalise

DEFAULT_DIM = 384
# Word hashes are cached across calls; the cache is dropped when it grows past this
# many distinct words (a few tens of MB at most).
MAX_CACHED_WORDS = 200_000
# Texts are embedded this many at a time, which bounds the scratch memory of one call.
BLOCK_SIZE = 256

_WORD_RE = re.compile(r"\w+")
# splitmix64 constants: combine two word hashes into a well-mixed bigram hash.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _word_hash(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")


def _bigram_hashes(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    x = (first * _GOLDEN) ^ second
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return x


class HashEmbedder:
    """Deterministic hashed bag of words and word bigrams. Label ``hash:<dim>``."""

    def __init__(self, dim: int = DEFAULT_DIM) -> None:
        if dim < 1:
            raise ValueError("dim must be >= 1")
        self.dim = dim
        self.label = f"hash:{dim}"
        self._word_hashes: dict[str, int] = {}
        self._cache_lock = threading.Lock()

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        blocks = [
            self._embed_block(texts[start : start + BLOCK_SIZE])
            for start in range(0, len(texts), BLOCK_SIZE)
        ]
        return np.vstack(blocks) if blocks else np.zeros((0, self.dim), dtype=np.float32)

    def _embed_block(self, texts: list[str]) -> np.ndarray:
        words_per_text = [_WORD_RE.findall(text.lower()) for text in texts]
        hashes = self._hashes_for({w for words in words_per_text for w in words})

        rows: list[np.ndarray] = []
        features: list[np.ndarray] = []
        counts: list[np.ndarray] = []
        for row, words in enumerate(words_per_text):
            if not words:
                continue
            unigrams = np.fromiter(
                map(hashes.__getitem__, words), dtype=np.uint64, count=len(words)
            )
            bigrams = _bigram_hashes(unigrams[:-1], unigrams[1:])
            distinct, tf = np.unique(np.concatenate((unigrams, bigrams)), return_counts=True)
            features.append(distinct)
            counts.append(tf)
            rows.append(np.full(len(distinct), row, dtype=np.int64))

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not features:
            return out
        row_ids = np.concatenate(rows)
        feature_ids = np.concatenate(features)
        tf = np.concatenate(counts)

        buckets = ((feature_ids >> np.uint64(1)) % np.uint64(self.dim)).astype(np.int64)
        signs = np.where(feature_ids & np.uint64(1), 1.0, -1.0)
        weights = signs * (1.0 + np.log(tf))
        flat = np.bincount(row_ids * self.dim + buckets, weights=weights, minlength=out.size)
        return l2_normalise(flat.reshape(out.shape))

    def _hashes_for(self, words: set[str]) -> dict[str, int]:
        """The 64-bit hash of each word, from the cache where possible."""
        cache = self._word_hashes
        found = {w: h for w in words if (h := cache.get(w)) is not None}
        missing = {w: _word_hash(w) for w in words if w not in found}
        if missing:
            with self._cache_lock:
                if len(cache) + len(missing) > MAX_CACHED_WORDS:
                    cache.clear()
                cache.update(missing)
            found.update(missing)
        return found
