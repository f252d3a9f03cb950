"""The file path as a lexical field (rifflux.search.paths), on real indexes.

Two files hold the same text, so their chunks' own bm25() ties and the core's tie-break
(path ascending) would put ``a-notes.md`` first; only the path field can put the file whose
path names a query word first. Each test also runs with the path weight 0, where the order
must be the tie-break's, so the expectation cannot hold by accident.
"""

from __future__ import annotations

from pathlib import Path

from rifflux_testing import make_settings

from rifflux.index.indexer import Indexer
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions
from rifflux.search.service import SearchService

TEXT = "# Notes\n\nDeploy the cluster nodes one at a time and watch the rollout.\n"
OFF = LexicalOptions(path_weight=0.0)


def index(root: Path, files: dict[str, str]) -> SearchService:
    docs = root / "docs"
    for name, text in files.items():
        target = docs / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    settings = make_settings(root)
    Indexer(settings).run([docs])
    return SearchService(settings)


def paths(service: SearchService, query: str, mode: str = "lexical") -> list[str]:
    """Result paths without the ``docs/`` every stored path starts with here."""
    return [hit["path"].removeprefix("docs/") for hit in service.search(query, top_k=5, mode=mode)]


def test_a_path_naming_a_query_word_ranks_its_file_first(tmp_path: Path) -> None:
    service = index(tmp_path, {"a-notes.md": TEXT, "z/kubernetes-rollout.md": TEXT})
    assert DEFAULT_OPTIONS.path_weight > 0
    assert paths(service, "kubernetes deploy") == ["z/kubernetes-rollout.md", "a-notes.md"]
    # Hybrid's lexical side is the same search.
    ranks = {
        hit["path"]: hit["score_breakdown"]["lexical_rank"]
        for hit in service.search("kubernetes deploy", top_k=5, mode="hybrid")
    }
    assert ranks == {"docs/z/kubernetes-rollout.md": 1, "docs/a-notes.md": 2}
    off = SearchService(service.settings, lexical=OFF)
    assert paths(off, "kubernetes deploy") == ["a-notes.md", "z/kubernetes-rollout.md"]
    # A path that matches no query word changes nothing, and a path alone finds nothing.
    assert paths(service, "deploy") == paths(off, "deploy")
    assert paths(service, "kubernetes") == []


def test_the_path_field_follows_the_index_after_a_reindex(tmp_path: Path) -> None:
    service = index(tmp_path, {"a-notes.md": TEXT})
    assert paths(service, "terraform deploy") == ["a-notes.md"]  # Builds the path table.
    late = tmp_path / "docs" / "zz" / "terraform.md"
    late.parent.mkdir()
    late.write_text(TEXT)
    Indexer(service.settings).run([tmp_path / "docs"])
    # Same service, same connection: the new file's path counts at once.
    assert paths(service, "terraform deploy") == ["zz/terraform.md", "a-notes.md"]
    off = SearchService(service.settings, lexical=OFF)
    assert paths(off, "terraform deploy") == ["a-notes.md", "zz/terraform.md"]
