"""``ServedPaths``: the one check of what a call may return, and searches filtered by it
before ``top_k``, also when answered from the query cache."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from rifflux_testing import make_settings

from rifflux.errors import PathNotAllowedError, SecretPathError
from rifflux.index.allowed import real
from rifflux.index.indexer import Indexer
from rifflux.search.request import SearchRequest
from rifflux.search.served import ServedPaths
from rifflux.search.service import SearchService

NOTE = "# Note {n}\n\nThe marmalade recipe number {n} needs oranges.\n"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[SearchService]:
    for folder in ("a", "b", ".aws"):
        (tmp_path / folder).mkdir()
        for n in range(3):
            (tmp_path / folder / f"{n}.md").write_text(NOTE.format(n=n))
    settings = make_settings(tmp_path, allow_secret_paths=True)
    Indexer(settings).run([tmp_path])
    service = SearchService(settings)
    yield service
    service.close()


def paths(service: SearchService, served: ServedPaths | None, **options: object) -> list[str]:
    request = SearchRequest(query="marmalade oranges", mode="lexical", **options)  # type: ignore[arg-type]
    return sorted(r["path"] for r in service.search_response(request, served)["results"])


def test_refusal_names_the_roots_or_the_deny_rule(tmp_path: Path) -> None:
    served = ServedPaths((real(tmp_path / "a"),))
    assert served.refusal("a/0.md", tmp_path / "a" / "0.md") is None
    outside = served.refusal("b/0.md", tmp_path / "b" / "0.md")
    assert isinstance(outside, PathNotAllowedError)
    assert str(outside).startswith("'b/0.md' is indexed but lies outside the allowed roots")
    secret = ServedPaths((real(tmp_path),)).refusal(".aws/0.md", tmp_path / ".aws" / "0.md")
    assert isinstance(secret, SecretPathError)
    assert str(secret).startswith("'.aws/0.md' is not served: secret path (.aws)")
    lifted = ServedPaths((real(tmp_path),), allow_secrets=True)
    assert lifted.refusal(".aws/0.md", tmp_path / ".aws" / "0.md") is None


def test_each_call_s_roots_get_their_own_answer_from_the_cache(
    service: SearchService, tmp_path: Path
) -> None:
    every = [f"{d}/{n}.md" for d in (".aws", "a", "b") for n in range(3)]
    assert paths(service, None) == every
    for _ in range(2):  # The second time from the query cache.
        assert paths(service, ServedPaths((real(tmp_path / "a"),))) == every[3:6]
        assert paths(service, ServedPaths((real(tmp_path / "b"),))) == every[6:]
        assert paths(service, ServedPaths((real(tmp_path),))) == every[3:]
        assert paths(service, None) == every


def test_top_k_is_filled_from_the_files_the_call_may_return(
    service: SearchService, tmp_path: Path
) -> None:
    """Nine notes tie; top_k 2 takes 4 lexical candidates, which need not hold b's: the
    search reaches deeper until two of b's files are found."""
    served = ServedPaths((real(tmp_path / "b"),))
    for group_by in ("chunk", "file"):
        for top_k in (1, 2, 3):
            found = paths(service, served, top_k=top_k, group_by=group_by)
            assert len(found) == top_k and all(p.startswith("b/") for p in found), found


def test_a_file_swapped_for_a_link_out_of_the_roots_leaves_the_cached_answer(
    service: SearchService, tmp_path: Path
) -> None:
    served = ServedPaths((real(tmp_path / "a"),))
    assert paths(service, served) == ["a/0.md", "a/1.md", "a/2.md"]
    (tmp_path / "a" / "1.md").unlink()
    os.symlink(tmp_path / "b" / "1.md", tmp_path / "a" / "1.md")
    assert paths(service, served) == ["a/0.md", "a/2.md"]
