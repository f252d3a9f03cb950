"""``has_cjk`` answers as the CJK run pattern does, whether or not the text is ASCII."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rifflux.bigrams import _RUN, has_cjk

texts = st.text(alphabet=st.sampled_from("ab 1\n#é—😀数据库カナ한글\u1100\u11ff\uff66\uff9f"))


@settings(max_examples=300, deadline=None)
@given(texts)
def test_has_cjk_agrees_with_the_run_pattern(text: str) -> None:
    assert has_cjk(text) is (_RUN.search(text) is not None)
    assert has_cjk(text + " plain ascii") is has_cjk(text)
