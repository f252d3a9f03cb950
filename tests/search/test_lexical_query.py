from rifflux.search.query import MAX_QUERY_TERMS, build_match_query, query_terms


def test_terms_are_distinct_lowercase_words_without_stop_words() -> None:
    assert query_terms("How to write Unit tests in Python, unit TESTS") == [
        "write",
        "unit",
        "tests",
        "python",
    ]


def test_a_query_of_only_stop_words_keeps_them() -> None:
    assert query_terms("to be or not to be") == ["to", "be", "or", "not"]


def test_fts_syntax_never_reaches_match() -> None:
    assert build_match_query('"unbalanced AND NEAR(x y) col:val -neg *star') == (
        '"unbalanced" OR "near" OR "x" OR "y" OR "col" OR "val" OR "neg" OR "star"'
    )
    assert build_match_query("*** --- ()") is None


def test_query_terms_are_bounded() -> None:
    assert len(query_terms(" ".join(f"w{i}" for i in range(500)))) == MAX_QUERY_TERMS
