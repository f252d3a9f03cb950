import hashlib
import re

import numpy as np
import pytest

from rifflux.embed import Embedder, HashEmbedder, hashing
from rifflux.embed.base import l2_normalise


def test_hash_embedder_implements_the_protocol_with_its_label():
    embedder = HashEmbedder(64)
    assert isinstance(embedder, Embedder)
    assert (embedder.label, embedder.dim) == ("hash:64", 64)
    assert HashEmbedder().label == "hash:384"


def test_hash_rows_are_unit_norm_float32_in_input_order():
    texts = ["alpha beta gamma", "a completely different sentence", "alpha beta gamma"]
    vectors = HashEmbedder().embed_batch(texts)
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(vectors[0], vectors[2])
    assert not np.array_equal(vectors[0], vectors[1])


def test_hash_vectors_are_fixed_across_processes_and_releases():
    # "hello" twice (weight 1 + ln 2), "world", "rifflux" and three bigrams. Computed once;
    # a change here makes stored hash:384 vectors incomparable with new ones.
    vector = HashEmbedder().embed_batch(["Hello world, hello Rifflux!"])[0]
    expected = {45: -0.356535, 66: -0.356535, 190: 0.356535, 211: 0.603667, 300: -0.356535}
    expected[330] = 0.356535
    assert np.flatnonzero(vector).tolist() == sorted(expected)
    np.testing.assert_allclose(
        vector[sorted(expected)], [expected[i] for i in sorted(expected)], atol=1e-6
    )


# Texts that exercise every part of the hashing: repeated words and bigrams (tf > 1),
# Unicode case folding and word characters, one-word and wordless texts, a long text.
PINNED_TEXTS = [
    "Hello world, hello Rifflux!",
    "",
    "--- *** ---",
    "ΣΊΣΥΦΟΣ straße Ünïcödé 東京タワー 서울 café café café",
    "# Install\n\nRun `pip install rifflux` then `rifflux index .`; repeat: index index index.",
    " ".join(f"word{i % 37} other{i % 11}" for i in range(500)),
    "a",
    "a a",
]


PINNED_DIGESTS = {
    384: "b9ac33d7e3f91ec5fd4dca01671f8f865a6791b69a2e36198516b0ea723837ea",
    64: "d9893bf50e6153590bb4a06009d8ac049de45796a05e70bad4c1c31b130c4d38",
}


@pytest.mark.parametrize(("dim", "digest"), PINNED_DIGESTS.items())
def test_hash_vectors_are_bit_identical_to_the_pinned_release(dim, digest):
    # sha256 of the float32 bytes, computed with the per-text implementation before the
    # block was vectorised: stored vectors are compared bit for bit with new ones.
    vectors = HashEmbedder(dim).embed_batch(PINNED_TEXTS)
    raw = np.ascontiguousarray(vectors, dtype="<f4").tobytes()
    assert hashlib.sha256(raw).hexdigest() == digest


def _reference_vector(text: str, dim: int) -> np.ndarray:
    """The definition, one text at a time: each distinct feature adds ±(1 + ln tf) to its
    bucket, features in ascending order; then the row is L2-normalised."""
    words = np.array([hashing._word_hash(w) for w in _regex_words(text)], dtype=np.uint64)
    features = words.tolist() + hashing._bigram_hashes(words[:-1], words[1:]).tolist()
    counts = {feature: features.count(feature) for feature in sorted(set(features))}
    weights = 1.0 + np.log(np.array(list(counts.values()), dtype=np.float64))
    row = [0.0] * dim
    for feature, weight in zip(counts, weights.tolist(), strict=True):
        row[(feature >> 1) % dim] += weight if feature & 1 else -weight
    return l2_normalise(np.array([row]))[0]


def test_hash_vectors_match_the_definition_for_texts_of_every_length(monkeypatch):
    # Texts of 0 to 300 words in one block (their features are sorted in rows padded to
    # the longest of a group), and a word whose hash is the padding value.
    real_hash = hashing._word_hash
    monkeypatch.setattr(
        hashing, "_word_hash", lambda word: 2**64 - 1 if word == b"pad" else real_hash(word)
    )
    texts = [" ".join(f"w{(i * j) % 50}" for j in range(i)) for i in range(0, 301, 7)]
    texts += ["pad", "pad pad w1 pad", "x pad y pad x pad", *PINNED_TEXTS]
    vectors = HashEmbedder(97).embed_batch(texts)
    for text, vector in zip(texts, vectors, strict=True):
        np.testing.assert_array_equal(vector, _reference_vector(text, 97))


def test_hash_is_case_insensitive_and_ignores_punctuation():
    vectors = HashEmbedder().embed_batch(["Hello, World!", "hello world"])
    np.testing.assert_array_equal(vectors[0], vectors[1])


@pytest.mark.parametrize("text", ["!!!", "", "  \n\t", "--- *** ---"])
def test_hash_gives_zero_vector_for_text_without_tokens(text):
    vectors = HashEmbedder().embed_batch([text, "some words"])
    assert not vectors[0].any()
    assert np.linalg.norm(vectors[1]) == pytest.approx(1.0, abs=1e-6)


def test_hash_empty_list_gives_zero_rows():
    assert HashEmbedder(32).embed_batch([]).shape == (0, 32)


def test_hash_row_does_not_depend_on_the_rest_of_the_batch():
    texts = [f"document number {i} about topic {i % 7}" for i in range(600)]
    embedder = HashEmbedder()
    together = embedder.embed_batch(texts)
    alone = np.vstack([HashEmbedder().embed_batch([text]) for text in texts[250:260]])
    np.testing.assert_array_equal(together[250:260], alone)


def test_hash_scores_shared_words_above_unrelated_text():
    query, related, unrelated = HashEmbedder().embed_batch(
        [
            "install the package on linux",
            "how to install the package on a linux machine",
            "the recipe needs two eggs and flour",
        ]
    )
    assert query @ related > 0.5
    assert query @ related > query @ unrelated + 0.3


def test_hash_rejects_nonpositive_dim():
    with pytest.raises(ValueError, match="dim"):
        HashEmbedder(0)


WORD_TEXTS = [
    "".join(map(chr, range(128))),
    "snake_case CamelCase x86_64 v1.2.3 a-b a/b a\tb\x1fc\x0bd",
    "KELVIN \u212a and café: \u00a0nbsp\u2028line — dash",
    "ΣΊΣΥΦΟΣ straße 東京タワー",
    # Runs that mix ASCII word characters with other characters, word or not.
    "abc東京def x_é_y 123٤٥٦ a—b a\u00a0b a😀b İstanbul e\u0301t\u0301 \u0301abc",
    "ﬁle Ǆ \u0345 \uff21\uff22 \U0001d400x ab\u200bcd \u3000x\u3000",
    "lone \ud800 surrogate\udfffx \ud83d\ude00 a",
    "".join(map(chr, range(128, 1024))),
    # Words around the 8- and 16-byte keys of the short-word table, and longer ones.
    " ".join("abcdefghijklmnopqrstuvwxyz"[:n] for n in range(1, 27)),
    " ".join("Z" * n for n in range(1, 20)) + " " + "_9" * 40,
    "",
    "!!! ---",
    "é",
    "word",
]


@pytest.mark.parametrize("texts", [WORD_TEXTS, WORD_TEXTS[-6:], WORD_TEXTS[:4]])
def test_hash_words_are_the_lower_cased_regex_words(texts):
    # Texts are split as bytes in numpy; runs holding non-ASCII characters go through the
    # regex, short ASCII words through a numpy table, long ones through a dict.
    words = [(row, word) for row, text in enumerate(texts) for word in _regex_words(text)]
    for _ in range(2):  # the second time from the caches
        hashes, rows = HashEmbedder()._block_words(texts)
        assert rows.tolist() == [row for row, _ in words]
        assert hashes.tolist() == [hashing._word_hash(word) for _, word in words]


def _regex_words(text: str) -> list[bytes]:
    return [word.encode("utf-8") for word in re.findall(r"\w+", text.lower())]


def test_hash_words_keep_their_hashes_when_the_caches_grow_and_are_dropped(monkeypatch):
    # 200 new words a text: the table grows in the first block, and again with them in it.
    texts = [" ".join(f"w{i}x{j}" for j in range(200)) + " ünï" for i in range(400)]
    texts.append(" ".join(f"long_word_number_{i}" for i in range(3000)))
    embedder = HashEmbedder()
    first = embedder.embed_batch(texts)
    for text, vector in zip(texts[::80], first[::80], strict=True):
        np.testing.assert_array_equal(HashEmbedder().embed_batch([text])[0], vector)
    # Again, with the words of the first texts from the grown table.
    np.testing.assert_array_equal(embedder.embed_batch(texts), first)
    monkeypatch.setattr(hashing, "MAX_CACHED_WORDS", 1000)
    np.testing.assert_array_equal(embedder.embed_batch(texts), first)
    hashes, _ = embedder._block_words(texts[:5])
    expected = [hashing._word_hash(word) for text in texts[:5] for word in _regex_words(text)]
    assert hashes.tolist() == expected
