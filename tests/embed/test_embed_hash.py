import hashlib
import re

import numpy as np
import pytest

from rifflux.embed import Embedder, HashEmbedder, hashing


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


def test_hash_vectors_stay_pinned_when_features_tie_in_the_sort_key(monkeypatch):
    # Keep 4 bits of each feature beside the text number: most features of a text tie on
    # the key, and the block is sorted again on the full features.
    monkeypatch.setattr(hashing, "_ROW_BITS", np.uint64(60))
    monkeypatch.setattr(hashing, "_ROW_SHIFT", np.uint64(4))
    vectors = HashEmbedder(384).embed_batch(PINNED_TEXTS)
    raw = np.ascontiguousarray(vectors, dtype="<f4").tobytes()
    assert hashlib.sha256(raw).hexdigest() == PINNED_DIGESTS[384]


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


@pytest.mark.parametrize(
    "text",
    [
        "".join(map(chr, range(128))),
        "snake_case CamelCase x86_64 v1.2.3 a-b a/b a\tb\x1fc\x0bd",
        "KELVIN \u212a and café: \u00a0nbsp\u2028line — dash",
        "ΣΊΣΥΦΟΣ straße 東京タワー",
    ],
)
def test_hash_words_are_the_lower_cased_regex_words(text):
    # ASCII texts are split with str.translate and str.split, others with the regex.
    assert hashing._words(text) == re.findall(r"\w+", text.lower())
