"""The file path as a lexical field (``files_fts``, rifflux.store.paths), on real indexes.

Two files hold the same text, so their chunks' own bm25() ties and the core's tie-break
(path ascending) would put the file whose path sorts first first; only the path field can
put the file whose path names a query word first. Each test also runs with the path
weight 0 (or without the table), where the order must be the tie-break's, so the
expectation cannot hold by accident.
"""

from __future__ import annotations

from pathlib import Path

from rifflux_testing import make_settings

from rifflux.index.indexer import Indexer
from rifflux.search.lexical import DEFAULT_OPTIONS, LexicalOptions
from rifflux.search.service import SearchService
from rifflux.store.connection import open_index

TEXT = "# Notes\n\nDeploy the cluster nodes one at a time and watch the rollout.\n"
OFF = LexicalOptions(path_weight=0.0)


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        target = root / "docs" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def index(root: Path, files: dict[str, str]) -> SearchService:
    write(root, files)
    settings = make_settings(root)
    Indexer(settings).run([root / "docs"])
    return SearchService(settings)


def reindex(service: SearchService) -> None:
    Indexer(service.settings).run([service.settings.base_dir / "docs"])


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


def test_the_path_field_follows_new_and_renamed_files(tmp_path: Path) -> None:
    service = index(tmp_path, {"a-notes.md": TEXT, "b-kubernetes.md": TEXT})
    assert paths(service, "terraform deploy") == ["a-notes.md", "b-kubernetes.md"]
    write(tmp_path, {"zz/terraform.md": TEXT})
    reindex(service)
    # Same service, same connection: the new file's path counts at once.
    assert paths(service, "terraform deploy") == [
        "zz/terraform.md",
        "a-notes.md",
        "b-kubernetes.md",
    ]
    # A renamed file: its new path's words count, its old path's no longer do.
    assert paths(service, "kubernetes deploy")[0] == "b-kubernetes.md"
    docs = tmp_path / "docs"
    (docs / "b-kubernetes.md").rename(docs / "b-helm.md")
    reindex(service)
    assert paths(service, "kubernetes deploy") == ["a-notes.md", "b-helm.md", "zz/terraform.md"]
    assert paths(service, "helm deploy") == ["b-helm.md", "a-notes.md", "zz/terraform.md"]
    off = SearchService(service.settings, lexical=OFF)
    assert paths(off, "helm deploy") == ["a-notes.md", "b-helm.md", "zz/terraform.md"]


def test_an_index_from_before_the_path_table_gets_it_filled_by_the_next_writer(
    tmp_path: Path,
) -> None:
    service = index(tmp_path, {"a-notes.md": TEXT, "z/kubernetes-rollout.md": TEXT})
    service.close()
    conn = open_index(service.settings.db_path)
    conn.executescript(
        "DROP TRIGGER files_fts_insert; DROP TRIGGER files_fts_delete; "
        "DROP TRIGGER files_fts_update; DROP TABLE files_fts; DROP INDEX chunks_file_of;"
    )
    conn.close()
    # A reader of such an index searches as without the path field, and never fails.
    old = SearchService(service.settings)
    assert paths(old, "kubernetes deploy") == ["a-notes.md", "z/kubernetes-rollout.md"]
    # A writer's open adds the table (and the join's index) and fills it from ``files``;
    # the reader, still open, sees it at its next search.
    conn = open_index(service.settings.db_path)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert {"files_fts", "files_fts_insert", "chunks_file_of"} <= names
    conn.close()
    assert paths(old, "kubernetes deploy") == ["z/kubernetes-rollout.md", "a-notes.md"]
    old.close()
