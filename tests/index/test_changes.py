import hashlib
import os
from pathlib import Path

from rifflux.index.changes import (
    FileWork,
    StoredFileState,
    batch_by_bytes,
    decide,
    decode_text,
    paths_to_prune,
)
from rifflux.index.scan import ScannedFile


def scanned(path: Path) -> ScannedFile:
    st = os.stat(path)
    return ScannedFile(str(path), path.name, st.st_mtime_ns, st.st_size)


def test_unchanged_metadata_skips_without_reading(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_text("hello")
    s = scanned(f)
    f.chmod(0)  # reading would fail: the decision must come from metadata alone
    try:
        decision = decide(
            s, StoredFileState(s.mtime_ns, s.size_bytes, "x"), force=False, max_file_bytes=100
        )
    finally:
        f.chmod(0o644)
    assert decision.kind == "unchanged"


def test_same_hash_new_mtime_refreshes_metadata_only(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_text("hello")
    sha = hashlib.sha256(b"hello").hexdigest()
    decision = decide(scanned(f), StoredFileState(1, 5, sha), force=False, max_file_bytes=100)
    assert decision.kind == "metadata" and decision.sha256 == sha


def test_changed_hash_or_force_reindexes(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_text("hello")
    s = scanned(f)
    assert decide(s, StoredFileState(1, 5, "old"), force=False, max_file_bytes=100).kind == "index"
    same = StoredFileState(s.mtime_ns, s.size_bytes, hashlib.sha256(b"hello").hexdigest())
    forced = decide(s, same, force=True, max_file_bytes=100)
    assert forced.kind == "index" and forced.work is not None and forced.work.text == "hello"


def test_bad_input_is_skipped_with_a_reason(tmp_path: Path) -> None:
    big = tmp_path / "big.md"
    big.write_text("x" * 200)
    assert "larger than" in decide(scanned(big), None, force=False, max_file_bytes=100).reason
    binary = tmp_path / "bin.md"
    binary.write_bytes(b"abc\x00def")
    assert "binary" in decide(scanned(binary), None, force=False, max_file_bytes=100).reason
    locked = tmp_path / "locked.md"
    locked.write_text("secret")
    s = scanned(locked)
    locked.chmod(0)
    try:
        if not os.access(locked, os.R_OK):  # root can read anything
            assert "unreadable" in decide(s, None, force=False, max_file_bytes=100).reason
    finally:
        locked.chmod(0o644)


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert decode_text(b"caf\xe9 ok") == "caf\ufffd ok"
    assert decode_text("\ufeffbom".encode()) == "bom"
    assert decode_text(b"a\x00b") is None


def test_prune_touches_only_files_under_scanned_roots() -> None:
    stored = ["docs/a.md", "docs/gone.md", "notes/keep.md", "docsx/other.md"]
    assert paths_to_prune(stored, {"docs/a.md"}, ["docs"]) == ["docs/gone.md"]
    assert paths_to_prune(stored, set(), ["docs/a.md"]) == ["docs/a.md"]


def test_batches_group_by_bytes() -> None:
    works = [FileWork(f"{i}.md", 0, size, "", "") for i, size in enumerate([40, 40, 40, 500, 10])]
    batches = [[w.rel_path for w in b] for b in batch_by_bytes(works, 100)]
    assert batches == [["0.md", "1.md"], ["2.md"], ["3.md"], ["4.md"]]
