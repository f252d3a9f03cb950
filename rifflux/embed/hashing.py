"""A dependency-free embedder: signed feature hashing of words and word bigrams.

It captures lexical overlap only, not meaning; it is the fallback when the ONNX model
cannot be loaded, and a fast stand-in for tests. Vectors depend on nothing but the text
and ``dim``: tokens are hashed with BLAKE2b (Python's ``hash()`` is salted per process),
so vectors stored by one process can be compared with vectors made by another.

A feature (a word, or a pair of adjacent words) occurring ``tf`` times in a text adds
``±(1 + ln tf)`` to one of ``dim`` buckets; the bucket and the sign come from different
bits of the feature's 64-bit hash. The row is then L2-normalised.

A block of texts is embedded in numpy calls over all its words and features at once,
bit-identical to embedding each text on its own (a test pins the exact bytes): the words
are found in the block's joined bytes, ASCII words of up to 16 bytes get their hashes from
a numpy table keyed by their bytes, and each text's features are sorted in a row of a 2-D
array. The 15,037 awesome-copilot chunk texts take about 0.35 CPU-s; what is left is
mostly hashing new words, lower-casing non-ASCII texts and the runs of non-ASCII words.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from itertools import chain

import numpy as np

from rifflux.embed.base import l2_normalise

DEFAULT_DIM = 384
# Word hashes are cached across calls; the cache is dropped before a block once it holds
# more than this many distinct words (a few tens of MB at most).
MAX_CACHED_WORDS = 200_000
# Texts are embedded this many at a time, which bounds the scratch memory of one call.
BLOCK_SIZE = 256

_WORD_RE = re.compile(r"\w+")
# A byte table for ``bytes.translate``: every ASCII byte that ``\w`` does not match becomes
# a space and ASCII capitals become small letters; bytes of other characters are kept.
_WORD_BYTES = bytes(
    b + 32 if 65 <= b <= 90 else b if b >= 128 or _WORD_RE.match(chr(b)) else 32 for b in range(256)
)
# Slots of an empty short-word table: 2**16 slots, 1.5 MB.
_SHORT_TABLE_SLOTS = 1 << 16
# The low ``n`` bytes of a 64-bit number, for n = 0..8.
_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)
# splitmix64 constants: combine two word hashes into a well-mixed bigram hash.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _word_hash(word: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(word, digest_size=8).digest(), "little")


def _text_bytes(text: str) -> bytes:
    """The UTF-8 bytes of ``text.lower()``, each ASCII non-word character a space.

    Split on spaces, it gives runs of ASCII word characters and other characters: each
    word of ``_WORD_RE.findall(text.lower())`` lies within one run, a run of ASCII bytes
    only is one word, and only a run with other characters may hold several words or none.
    """
    if text.isascii():
        return text.encode("ascii").translate(_WORD_BYTES)
    # surrogatepass: a lone surrogate is not a word character, but must not stop encoding.
    return text.lower().encode("utf-8", "surrogatepass").translate(_WORD_BYTES)


def _slices(data: bytes, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
    return [data[start:end] for start, end in zip(starts.tolist(), ends.tolist(), strict=True)]


class _WordHashes(dict[bytes, int]):
    """A word's UTF-8 bytes → the word's 64-bit hash, computed on first lookup."""

    def __missing__(self, word: bytes) -> int:
        value = self[word] = _word_hash(word)
        return value


class _RunHashes(dict[bytes, tuple[int, ...]]):
    """A run of :func:`_text_bytes` with non-ASCII bytes → the hashes of its words, in
    order, computed on first lookup."""

    def __init__(self, word_hashes: _WordHashes) -> None:
        super().__init__()
        self._word_hashes = word_hashes

    def __missing__(self, run: bytes) -> tuple[int, ...]:
        words = _WORD_RE.findall(run.decode("utf-8", "surrogatepass"))
        value = self[run] = tuple(self._word_hashes[word.encode("utf-8")] for word in words)
        return value


class _ShortWordHashes:
    """The hashes of ASCII words of at most 16 bytes, looked up a block of words at once.

    A word is keyed by its bytes read as two little-endian 64-bit numbers, zero-padded
    (a word holds no zero byte, so the pair tells the word). The keys and hashes sit in
    numpy arrays, an open-addressing table with linear probing; an empty slot has first
    key 0. It holds at most half as many words as slots.
    """

    def __init__(self) -> None:
        self._reset(_SHORT_TABLE_SLOTS)

    def __len__(self) -> int:
        return self._count

    def _reset(self, slots: int) -> None:
        self._first = np.zeros(slots, dtype=np.uint64)
        self._second = np.zeros(slots, dtype=np.uint64)
        self._values = np.zeros(slots, dtype=np.uint64)
        self._count = 0
        self._shift = np.uint64(64 - (slots.bit_length() - 1))

    def clear(self) -> None:
        self._reset(_SHORT_TABLE_SLOTS)

    def _slots(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        return (((first * _GOLDEN) ^ second) * _MIX1 >> self._shift).astype(np.intp)

    def lookup(
        self, first: np.ndarray, second: np.ndarray, words: Callable[[np.ndarray], list[bytes]]
    ) -> np.ndarray:
        """The hash of each word given by its keys. The words not in the table are added,
        hashed from ``words(indices)``: the bytes of the words at those indices."""
        values, missing = self._find(first, second)
        if missing.size:
            self._reserve(first[missing], second[missing])
            new, new_slots, slots = self._add(first[missing], second[missing])
            hashes = map(_word_hash, words(missing[new]))
            self._values[new_slots] = np.fromiter(hashes, dtype=np.uint64, count=len(new))
            values[missing] = self._values[slots]
        return values

    def _find(self, first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the hash of each key pair, 0 where absent; the indices of the absent ones)."""
        slots = self._slots(first, second)
        held = self._first[slots]
        hit = (held == first) & (self._second[slots] == second)
        values = np.where(hit, self._values[slots], np.uint64(0))
        pending = np.flatnonzero(~hit)
        missing = [pending[:0]]
        mask = len(self._first) - 1
        while pending.size:
            at = slots[pending]
            held = self._first[at]
            hit = (held == first[pending]) & (self._second[at] == second[pending])
            values[pending[hit]] = self._values[at[hit]]
            empty = held == 0
            missing.append(pending[empty])
            probe = ~(hit | empty)
            pending = pending[probe]
            slots[pending] = (at[probe] + 1) & mask
        return values, np.concatenate(missing)

    def _reserve(self, first: np.ndarray, second: np.ndarray) -> None:
        """Room for the words of these keys (a word may come more than once): if need be, a
        table with more slots, the words put in again."""
        more = len(first)
        if 2 * (self._count + more) > len(self._first):
            order = np.lexsort((second, first))
            first, second = first[order], second[order]
            more = 1 + int(
                np.count_nonzero((first[1:] != first[:-1]) | (second[1:] != second[:-1]))
            )
        if 2 * (self._count + more) <= len(self._first):
            return
        held = np.flatnonzero(self._first)
        first, second, values = self._first[held], self._second[held], self._values[held]
        slots = len(self._first)
        while 2 * (len(held) + more) > slots:
            slots *= 2
        self._reset(slots)
        self._values[self._add(first, second)[2]] = values

    def _add(
        self, first: np.ndarray, second: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Put in the keys of words not in the table (a word may come more than once), their
        hashes left to the caller: (for each word, the index of one of its keys and the slot
        it took; the slot of every key)."""
        slots = self._slots(first, second)
        claims = np.empty(len(self._first), dtype=np.intp)
        pending = np.arange(len(first))
        new, new_slots = [pending[:0]], [pending[:0]]
        mask = len(self._first) - 1
        while pending.size:
            at = slots[pending]
            held = self._first[at]
            done = (held == first[pending]) & (self._second[at] == second[pending])
            free = held == 0
            # Of the keys probing one free slot, one takes it (whichever's claim is left);
            # the others probe it again and either find their word there or move on.
            claimants, claimed = pending[free], at[free]
            claims[claimed] = claimants
            won = claims[claimed] == claimants
            winners, taken = claimants[won], claimed[won]
            self._first[taken] = first[winners]
            self._second[taken] = second[winners]
            new.append(winners)
            new_slots.append(taken)
            done[free] = won
            slots[pending] = np.where(done | free, at, (at + 1) & mask)
            pending = pending[~done]
        self._count += sum(map(len, new))
        return np.concatenate(new), np.concatenate(new_slots), slots


def _bigram_hashes(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    x = (first * _GOLDEN) ^ second
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return x


def _starts(counts: np.ndarray) -> np.ndarray:
    """Where each group starts in a flat array that holds groups of ``counts`` items one
    after the other (the sums of the counts before it)."""
    return np.cumsum(counts) - counts


def _features_by_text(
    unigrams: np.ndarray,
    word_rows: np.ndarray,
    bigrams: np.ndarray,
    bigram_rows: np.ndarray,
    text_count: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(the features of each text ascending, texts in order; the number of each one's text)
    from the words and bigrams of a block, each in text order.

    Each text's features are sorted in a row of a 2-D array (numpy sorts many short rows
    several times faster than one long array), a row padded with the largest 64-bit number
    (a feature of that value sorts among the padding, which equals it). Texts are grouped by
    the bit length of their number of features, so padding at most doubles a row.
    """
    words = np.bincount(word_rows, minlength=text_count)
    pairs = np.maximum(words - 1, 0)
    counts = words + pairs
    groups = np.frexp(counts)[1]  # the bit length: 0 for a text without words
    row_starts = np.zeros(text_count, dtype=np.int64)
    rows = []
    size = 0
    for group in np.unique(groups[groups > 0]).tolist():
        members = np.flatnonzero(groups == group)
        width = int(counts[members].max())
        row_starts[members] = size + width * np.arange(len(members))
        rows.append((size, len(members), width))
        size += width * len(members)
    padded = np.full(size, np.iinfo(np.uint64).max, dtype=np.uint64)
    # A text's words, then its bigrams, from the start of its row.
    word_at = row_starts - _starts(words)
    padded[word_at[word_rows] + np.arange(len(unigrams))] = unigrams
    pair_at = row_starts + words - _starts(pairs)
    padded[pair_at[bigram_rows] + np.arange(len(bigrams))] = bigrams
    for start, count, width in rows:
        padded[start : start + count * width].reshape(count, width).sort(axis=1)
    taken = np.repeat(row_starts - _starts(counts), counts) + np.arange(int(counts.sum()))
    return padded[taken], np.repeat(np.arange(text_count), counts)


class HashEmbedder:
    """Deterministic hashed bag of words and word bigrams. Label ``hash:<dim>``."""

    def __init__(self, dim: int = DEFAULT_DIM) -> None:
        if dim < 1:
            raise ValueError("dim must be >= 1")
        self.dim = dim
        self.label = f"hash:{dim}"
        self._word_hashes = _WordHashes()
        self._run_hashes = _RunHashes(self._word_hashes)
        self._short_hashes = _ShortWordHashes()
        self._cache_lock = threading.Lock()

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        blocks = [
            self._embed_block(texts[start : start + BLOCK_SIZE])
            for start in range(0, len(texts), BLOCK_SIZE)
        ]
        return np.vstack(blocks) if blocks else np.zeros((0, self.dim), dtype=np.float32)

    def _embed_block(self, texts: list[str]) -> np.ndarray:
        """One block of texts, vectorised over the whole block.

        The features of every text (one entry per word and per pair of adjacent words of
        the same text) are laid out flat, sorted by (text, feature), and counted in runs.
        The result is bit-identical to embedding each text alone: ``np.bincount`` adds
        each bucket's weights in the same order as a per-text loop (texts in order, the
        features of a text ascending), and float addition depends on that order.
        """
        out_shape = (len(texts), self.dim)
        unigrams, word_rows = self._block_words(texts)
        if not unigrams.size:
            return np.zeros(out_shape, dtype=np.float32)
        # Adjacent words form a bigram only within one text.
        same_text = word_rows[:-1] == word_rows[1:]
        bigrams = _bigram_hashes(unigrams[:-1][same_text], unigrams[1:][same_text])

        feature_ids, row_ids = _features_by_text(
            unigrams, word_rows, bigrams, word_rows[1:][same_text], len(texts)
        )
        starts = np.ones(len(feature_ids), dtype=bool)
        starts[1:] = (feature_ids[1:] != feature_ids[:-1]) | (row_ids[1:] != row_ids[:-1])
        first = np.flatnonzero(starts)
        tf = np.diff(first, append=len(feature_ids))
        feature_ids, row_ids = feature_ids[first], row_ids[first]

        buckets = ((feature_ids >> np.uint64(1)) % np.uint64(self.dim)).astype(np.int64)
        signs = np.where(feature_ids & np.uint64(1), 1.0, -1.0)
        weights = signs * (1.0 + np.log(tf))
        size = out_shape[0] * out_shape[1]
        flat = np.bincount(row_ids * self.dim + buckets, weights=weights, minlength=size)
        return l2_normalise(flat.reshape(out_shape))

    def _block_words(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(the hash of each word of the block, the number of its text): the words of each
        text in order, those of ``_WORD_RE.findall(text.lower())``.

        The texts' :func:`_text_bytes` are joined by spaces and split into runs in numpy.
        An ASCII run of at most 16 bytes (most words) is hashed through the numpy table;
        a longer one, and each word of a run with non-ASCII bytes, through the dict.
        """
        parts = [_text_bytes(text) for text in texts]
        sizes = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)) + 1
        text_starts = _starts(sizes) + 1
        # A space before the first text, so that a run starts after a space; spaces after
        # the last, so that every run ends and 16 bytes can be read from any start.
        joined = b" " + b" ".join(parts) + b" " * 16
        buf = np.frombuffer(joined, dtype=np.uint8)
        in_run = buf != 32
        edges = np.flatnonzero(in_run[1:] != in_run[:-1]) + 1
        starts, ends = edges[0::2], edges[1::2]
        if not starts.size:
            return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
        run_rows = np.searchsorted(text_starts, starts, side="right") - 1
        lengths = ends - starts
        short = lengths <= 16
        mixed = np.zeros(len(starts), dtype=bool)
        if not joined.isascii():
            mixed[np.searchsorted(starts, np.flatnonzero(buf >= 128), side="right") - 1] = True
            short &= ~mixed
        run_hashes = np.zeros(len(starts), dtype=np.uint64)
        with self._cache_lock:
            held = len(self._word_hashes) + len(self._run_hashes) + len(self._short_hashes)
            if held > MAX_CACHED_WORDS:
                self._word_hashes.clear()
                self._run_hashes.clear()
                self._short_hashes.clear()
            at = starts[short]
            size = lengths[short]
            # Each 8 bytes from every offset, read as a little-endian number, then masked to
            # the word's bytes.
            windows = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=joined, strides=(1,))
            first = windows[at] & _LOW_BYTES[np.minimum(size, 8)]
            second = windows[at + 8] & _LOW_BYTES[np.clip(size - 8, 0, 8)]
            run_hashes[short] = self._short_hashes.lookup(
                first, second, lambda picked: _slices(joined, at[picked], at[picked] + size[picked])
            )
            long_runs = np.flatnonzero(~short & ~mixed)
            if long_runs.size:
                long_words = _slices(joined, starts[long_runs], ends[long_runs])
                run_hashes[long_runs] = np.fromiter(
                    map(self._word_hashes.__getitem__, long_words),
                    dtype=np.uint64,
                    count=len(long_runs),
                )
            if not mixed.any():
                return run_hashes, run_rows
            # A run with non-ASCII bytes stands for its words, however many (0 or more).
            mixed_runs = np.flatnonzero(mixed)
            runs = _slices(joined, starts[mixed_runs], ends[mixed_runs])
            words = list(map(self._run_hashes.__getitem__, runs))
        mixed_hashes = np.fromiter(chain.from_iterable(words), dtype=np.uint64)
        counts = np.ones(len(starts), dtype=np.int64)
        counts[mixed_runs] = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        firsts = _starts(counts)
        hashes = np.empty(int(counts.sum()), dtype=np.uint64)
        plain = ~mixed
        hashes[firsts[plain]] = run_hashes[plain]
        # The words of the mixed runs, in order, from their run's first position on.
        mixed_counts = counts[mixed_runs]
        offsets = np.repeat(firsts[mixed_runs] - _starts(mixed_counts), mixed_counts)
        hashes[offsets + np.arange(len(mixed_hashes))] = mixed_hashes
        return hashes, np.repeat(run_rows, counts)
